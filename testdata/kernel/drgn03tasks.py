#!/usr/bin/python3
"""drgn 0.3's frames of every task of a QEMU vmcore, as text (testdata/kernel/README.md, "deb-7.2").

    python3 testdata/kernel/drgn03tasks.py VMCORE VMLINUX | gzip -9n >NAME/drgn-t.txt.gz

Run in a Debian sid tree (debootstrap --variant=minbase --include=python3-drgn sid DIR, then
chroot DIR): python3-drgn 0.3.0-1 reads the ELF vmcores QEMU's dump-guest-memory writes as they
are (VMCOREINFO note, physical PT_LOADs) and unwinds with the vmlinux's DWARF (the -dbg
package's). For each task of for_each_task, in list order, it prints

    task PID COMM 0xTASK_STRUCT
      #N 0xPC SYMBOL+0xOFF/0xSIZE [inline] FUNCTION FILE:LINE

SYMBOL is drgn's ELF symbol at the pc (prog.symbol), FUNCTION drgn's frame name (DWARF: the
inlined function for an inline frame), FILE:LINE its frame.source(); "-" where drgn has none.
A task whose unwind raises prints "  error: MESSAGE". CI never runs this: the output is
committed next to the trimmed vmcore of the same stop.
"""
import sys

import drgn
from drgn.helpers.linux.pid import for_each_task


def fmt_sym(prog, pc):
    try:
        s = prog.symbol(pc)
    except LookupError:
        return "-"
    return "%s+%#x/%#x" % (s.name, pc - s.address, s.size)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    vmcore, vmlinux = sys.argv[1:]
    prog = drgn.Program()
    prog.set_core_dump(vmcore)
    prog.load_debug_info([vmlinux])
    print("# drgn %s over %s" % (drgn.__version__, vmcore.rsplit("/", 1)[-1]))
    for task in for_each_task(prog):
        comm = task.comm.string_().decode(errors="replace")
        print("task %d %s %#x" % (task.pid, comm, task.value_()))
        try:
            trace = prog.stack_trace(task)
        except Exception as e:  # ValueError, FaultError, LookupError
            print("  error: %s" % (str(e).replace("\n", " "),))
            continue
        for i, f in enumerate(trace):
            try:
                pc = f.pc
            except LookupError as e:
                print("  #%d pc unknown: %s" % (i, e))
                continue
            try:
                src, line, _ = f.source()
                where = "%s:%d" % (src, line)
            except LookupError:
                where = "-"
            print("  #%d %#x %s%s %s %s" % (i, pc, fmt_sym(prog, pc), " inline" if f.is_inline else "",
                                           f.name or "-", where))


if __name__ == "__main__":
    main()
