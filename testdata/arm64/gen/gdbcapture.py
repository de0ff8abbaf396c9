# gdbcapture.py: run by gen inside gdb-multiarch, stopped at the capture
# point. Writes registers, the stack from sp up to the end of its mapping
# (at most STACK_MAX bytes), the shadow call stack from SCS_BASE_EXPR to
# x18 + 32 bytes, where gdb finds main, the shared libraries and gdb's own
# backtrace, as JSON to CAPTURE_OUT. (CAPTURE_OUT, SCS_BASE_EXPR and
# STACK_MAX are set by gen with "python NAME = ...".)
import json

import gdb

MASK = (1 << 64) - 1
inf = gdb.selected_inferior()


def u64(v):
    return int(v) & MASK


def readable(addr):
    try:
        inf.read_memory(addr, 8)
        return True
    except gdb.MemoryError:
        return False


def reg(name, frame=None):
    if frame is None:
        return u64(gdb.parse_and_eval("$" + name))
    return u64(frame.read_register(name))


out = {"regs": {r: reg(r) for r in ("pc", "sp", "x18", "x29", "x30")}}

# The stack: from sp (16-byte aligned down) to the end of the mapping.
lo = out["regs"]["sp"] & ~15
top = (lo | 4095) + 1
while top - lo < STACK_MAX and readable(top):
    top += 4096
top = min(top, lo + STACK_MAX)
out["stack"] = {"base": lo, "hex": bytes(inf.read_memory(lo, top - lo)).hex()}

if SCS_BASE_EXPR:
    base = u64(gdb.parse_and_eval("(unsigned long)(" + SCS_BASE_EXPR + ")"))
    end = out["regs"]["x18"] + 32
    while end > base and not readable(end - 8):
        end -= 8
    out["scs_base"] = base
    out["scs"] = {"base": base, "hex": bytes(inf.read_memory(base, end - base)).hex()}

out["main"] = u64(gdb.parse_and_eval("(unsigned long)&main"))
out["libs"] = gdb.execute("info sharedlibrary", to_string=True)
out["gdb_version"] = gdb.VERSION

types = {
    gdb.NORMAL_FRAME: "normal",
    gdb.DUMMY_FRAME: "dummy",
    gdb.INLINE_FRAME: "inline",
    gdb.TAILCALL_FRAME: "tailcall",
    gdb.SIGTRAMP_FRAME: "sigtramp",
    gdb.ARCH_FRAME: "arch",
    gdb.SENTINEL_FRAME: "sentinel",
}
bt = []
f = gdb.newest_frame()
while f is not None and len(bt) < 1000:
    try:
        lr = reg("x30", f)
    except gdb.error:
        lr = 0
    bt.append({"pc": u64(f.pc()), "func": f.name() or "", "type": types.get(f.type(), str(f.type())), "lr": lr})
    try:
        f = f.older()
    except gdb.error:
        break
out["bt"] = bt

with open(CAPTURE_OUT, "w") as fh:
    json.dump(out, fh)
