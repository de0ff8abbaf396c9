# gcscapture.py: run by capture.sh inside gdb-multiarch (gdb 18) attached
# to qemu-aarch64 11.1's gdbstub, at the capture point. Writes to
# CAPTURE_OUT (set with "python CAPTURE_OUT = ...") as JSON: the
# registers, GCSPR_EL0 (QEMU's stub has no org.gnu.gdb.aarch64.gcs
# feature, so gdb has no $gcspr; it lists the system register as
# $GCSPR_EL0 in org.qemu.gdb.arm.sys.regs), the stack from sp to the end
# of its mapping (at most 64 KiB), the shadow call stack from g_scs_base to x18 + 32, the
# guarded control stack from GCSPR_EL0 - 64 (dead entries below the
# pointer) to the end of its mapping, and gdb's own backtrace, frame by
# frame and as "bt" prints it.
import json

import gdb

MASK = (1 << 64) - 1
LIMIT = 1 << 20
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


def mapping_end(addr, limit=LIMIT):
    """The end of the readable pages from addr up (at most limit bytes)."""
    top = (addr | 4095) + 1
    while top - addr < limit and readable(top):
        top += 4096
    return min(top, addr + limit)


def region(lo, hi):
    return {"base": lo, "hex": bytes(inf.read_memory(lo, hi - lo)).hex()}


out = {"regs": {r: reg(r) for r in ("pc", "sp", "x18", "x29", "x30")}}
out["regs"]["gcspr"] = reg("GCSPR_EL0")
out["gcscre0"] = reg("GCSCRE0_EL1")

sp = out["regs"]["sp"] & ~15
# At most 64 KiB of stack: a thread's stack mapping has other readable
# mappings right above it.
out["stack"] = region(sp, mapping_end(sp, 64 << 10))

scs = u64(gdb.parse_and_eval("(unsigned long)g_scs_base"))
if scs:
    end = out["regs"]["x18"] + 32
    while end > scs and not readable(end - 8):
        end -= 8
    out["scs"] = region(scs, end)

g = out["regs"]["gcspr"]
if g:
    lo = g
    while lo > g - 64 and readable(lo - 8):
        lo -= 8
    out["gcs"] = region(lo, mapping_end(g))

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
while f is not None and len(bt) < 200:
    bt.append({"pc": u64(f.pc()), "func": f.name() or "", "type": types.get(f.type(), str(f.type()))})
    try:
        f = f.older()
    except gdb.error:
        break
out["bt"] = bt
out["bt_text"] = gdb.execute("bt 40", to_string=True)

with open(CAPTURE_OUT, "w") as fh:
    json.dump(out, fh)
