# gdbbt.py: gdb's own backtrace of the stopped CPU, a second reference beside the printed trace.
#
# Loaded by capture.sh into gdb-multiarch (with the kernel's vmlinux, DWARF included) and run at
# each stop after the vmcore is written:   kbt FILE STOP PACMASK
#
# It appends to FILE:
#   - gdb's plain `bt` as gdb prints it. QEMU 7.2's gdbstub offers no pauth feature
#     (org.gnu.gdb.aarch64.pauth), so gdb does not strip the PAC of a return address read from the
#     stack: its plain bt stops at the first signed one.
#   - "#N pc=0x... func" lines: the same DWARF CFI unwinding, one frame at a time, with the PAC
#     stripped between frames. For each frame gdb unwinds the caller's registers (Frame.older(),
#     read_register: x19-x30, sp, pc, by the CFI of .debug_frame, or gdb's prologue analyzer where
#     there is none); the caller's pc is stripped (bit 55 copied into PACMASK's bits) and the
#     caller's registers are written to the stopped CPU, so gdb unwinds the next frame from there.
#     The CPU's registers are restored afterwards (checked: "restored ok"); the vmcore was
#     written before. Only the PAC strip is shared with the project's unwinder.
import gdb

REGS = ["x%d" % i for i in range(19, 31)] + ["sp", "pc"]
M64 = (1 << 64) - 1


def u64(v):
    return int(v) & M64


def strip(v, mask):
    return v | mask if v & (1 << 55) else v & ~mask & M64


def setregs(vals):
    for r, v in vals.items():
        gdb.execute("set $%s = 0x%x" % (r, v), to_string=True)


class KBT(gdb.Command):
    """kbt FILE STOP PACMASK: append gdb's backtrace of the selected thread to FILE."""

    def __init__(self):
        super().__init__("kbt", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        path, stop, mask = arg.split()
        mask = int(mask, 0)
        th = gdb.selected_thread()
        out = ["@@STOP %s thread %d (%s)" % (stop, th.num, th.details or "")]
        try:
            out.append("@@BT\n" + gdb.execute("bt 64", to_string=True).rstrip())
        except gdb.error as e:
            out.append("@@BT error: %s" % e)
        saved = {r: u64(gdb.parse_and_eval("$" + r)) for r in REGS}
        out.append("@@STRIPPED")
        try:
            for n in range(64):
                # Inlined functions at this pc are frames of their own in gdb, with the
                # registers of the function they were inlined into: list them, unwind
                # from the outermost (the function the kernel prints).
                f = gdb.newest_frame()
                inl = []
                while f.type() == gdb.INLINE_FRAME and f.older() is not None:
                    inl.append(f.name() or "??")
                    f = f.older()
                pc = u64(f.pc())
                line = "#%d pc=0x%x %s" % (n, pc, f.name() or "??")
                if inl:
                    line += " inlined=" + ",".join(inl)
                try:
                    o = f.older()
                except gdb.error as e:
                    out.append(line)
                    out.append("end: unwind error: %s" % e)
                    break
                if o is None:
                    out.append(line)
                    out.append("end: %s" % gdb.frame_stop_reason_string(f.unwind_stop_reason()))
                    break
                try:
                    vals = {r: u64(o.read_register(r)) for r in REGS}
                except gdb.error as e:
                    out.append(line)
                    out.append("end: caller registers: %s" % e)
                    break
                raw = vals["pc"]
                vals["pc"] = strip(raw, mask)
                out.append(line + " caller-raw=0x%x sp=0x%x x29=0x%x" % (raw, vals["sp"], vals["x29"]))
                if vals["pc"] == pc and vals["sp"] == u64(f.read_register("sp")):
                    out.append("end: caller identical")
                    break
                if gdb.execute("info symbol 0x%x" % vals["pc"], to_string=True).startswith("No symbol"):
                    out.append("#%d pc=0x%x ??" % (n + 1, vals["pc"]))
                    out.append("end: caller pc has no symbol")
                    break
                setregs(vals)
            else:
                out.append("end: 64 frames")
        finally:
            for _ in range(3):
                setregs(saved)
                gdb.execute("maintenance flush register-cache", to_string=True)
                back = {r: u64(gdb.parse_and_eval("$" + r)) for r in REGS}
                if back == saved:
                    break
            diff = ["%s=0x%x want 0x%x" % (r, back[r], saved[r]) for r in REGS if back[r] != saved[r]]
            out.append("restored %s" % ("ok" if not diff else "DIFFERENT: " + " ".join(diff)))
        with open(path, "a") as fh:
            fh.write("\n".join(out) + "\n")


KBT()
