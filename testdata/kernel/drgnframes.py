#!/usr/bin/python3
"""drgn's frames of every task of a QEMU vmcore, as text (testdata/kernel/README.md, "drgn").

    /usr/bin/python3 testdata/kernel/drgnframes.py VMCORE VMLINUX [MODULE.ko...] >drgn-STOP.txt

drgn 0.0.22 (Debian bookworm's python3-drgn) cannot read the vmcores QEMU's dump-guest-memory
writes as they are: their PT_LOADs give physical addresses only (p_vaddr == p_paddr), and
NT_PRSTATUS's pr_pid is the CPU index + 1, which drgn takes for the pid of the task running on
that CPU. So this script writes a copy, VMCORE.drgn (next to VMCORE, or in $DRGN_TMP), over the
same bytes with
  - for each PT_LOAD, one for the linear map (p_vaddr = pa - PHYS_OFFSET + PAGE_OFFSET) and, where
    it holds part of the kernel image (the vmlinux's own PT_LOADs, moved by kimage_voffset), one
    for the image (p_vaddr = pa + kimage_voffset), p_paddr and p_offset unchanged (the table is
    appended at the end of the file and e_phoff points at it);
  - in each CPU's NT_PRSTATUS, pr_pid = the pid of per_cpu(__entry_task, cpu), read by drgn from
    a first open of the copy;
then walks every task with drgn (for_each_task, stack_trace) and prints, per task, its frames:

    task PID COMM 0xTASK_STRUCT
      #N 0xPC SYMBOL+0xOFF/0xSIZE [inline] FUNCTION FILE:LINE

SYMBOL is drgn's ELF symbol at the pc (prog.symbol), FUNCTION drgn's frame name (DWARF: the
inlined function for an inline frame), FILE:LINE drgn's frame.source(); "-" where drgn has none.
A task whose unwind raises prints "  error: MESSAGE". Nothing here is needed in CI: the output
is committed next to the trimmed vmcore of the same stop.
"""
import os
import shutil
import struct
import sys
import time

import drgn
from drgn.helpers.linux.percpu import per_cpu
from drgn.helpers.linux.pid import for_each_task

PT_LOAD, PT_NOTE = 1, 4
NT_PRSTATUS = 1


def phdrs(b, phoff, phnum):
    out = []
    for i in range(phnum):
        o = phoff + i * 56
        out.append(list(struct.unpack_from("<IIQQQQQQ", b, o)))
    return out


def notes(b, off, size):
    """(name, type, desc offset, desc size) of each note in [off, off+size)."""
    end = off + size
    while off + 12 <= end:
        namesz, descsz, typ = struct.unpack_from("<III", b, off)
        name = bytes(b[off + 12:off + 12 + namesz]).rstrip(b"\0").decode()
        d = off + 12 + (namesz + 3) // 4 * 4
        yield name, typ, d, descsz
        off = d + (descsz + 3) // 4 * 4


def read_at(f, off, n):
    f.seek(off)
    return f.read(n)


def note_segments(f, ph):
    """(file offset, bytes) of each PT_NOTE segment."""
    return [(p[2], read_at(f, p[2], p[5])) for p in ph if p[0] == PT_NOTE]


def vmcoreinfo(segs):
    for _, b in segs:
        for name, typ, d, n in notes(b, 0, len(b)):
            if name == "VMCOREINFO":
                info = {}
                for line in bytes(b[d:d + n]).decode().splitlines():
                    if "=" in line:
                        k, v = line.split("=", 1)
                        info[k] = v
                return info
    sys.exit("no VMCOREINFO note")


def num(s, base=10):
    """A VMCOREINFO value: 0x-prefixed hex, else in base (KERNELOFFSET is bare hex)."""
    return int(s, 16) if s.startswith("0x") else int(s, base)


def image_ranges(vmlinux):
    """The [vaddr, vaddr+memsz) of the vmlinux's PT_LOADs (link addresses)."""
    with open(vmlinux, "rb") as f:
        h = f.read(64)
        phoff, = struct.unpack_from("<Q", h, 32)
        phnum, = struct.unpack_from("<H", h, 56)
        t = read_at(f, phoff, 56 * phnum)
    out = []
    for p in phdrs(t, 0, phnum):
        if p[0] == PT_LOAD and p[3] >= 1 << 63:
            out.append((p[3], p[3] + p[6]))
    return out


def write_copy(src, dst, vmlinux):
    """Copies src to dst with the virtual PT_LOADs appended; returns the
    file offsets of the NT_PRSTATUS pr_pid fields, in CPU order."""
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        h = f.read(64)
        phoff, = struct.unpack_from("<Q", h, 32)
        phnum, = struct.unpack_from("<H", h, 56)
        ph = phdrs(read_at(f, phoff, 56 * phnum), 0, phnum)
        segs = note_segments(f, ph)
        info = vmcoreinfo(segs)
        va_bits = int(info["NUMBER(VA_BITS)"])
        page_offset = (1 << 64) - (1 << va_bits)  # PAGE_OFFSET = -(1 << VA_BITS) (asm/memory.h)
        phys_offset = num(info["NUMBER(PHYS_OFFSET)"])
        kvo = num(info["NUMBER(kimage_voffset)"])
        koff = num(info.get("KERNELOFFSET", "0"), 16)
        img = [(lo + koff - kvo, hi + koff - kvo) for lo, hi in image_ranges(vmlinux)]  # physical
        new = []
        for p in ph:
            if p[0] != PT_LOAD:
                new.append(p)
                continue
            typ, flags, off, _, pa, filesz, memsz, align = p
            new.append([typ, flags, off, pa - phys_offset + page_offset, pa, filesz, memsz, align])
            for lo, hi in img:
                a, e = max(pa, lo), min(pa + memsz, hi)
                if a >= e:
                    continue
                d = a - pa
                fs = max(0, min(filesz - d, e - a))
                new.append([typ, flags, off + d, a + kvo, a, fs, e - a, align])
        if len(new) >= 0xffff:
            sys.exit("too many program headers for e_phnum")
        end = f.seek(0, 2)
        at = (end + 7) // 8 * 8
        f.write(b"\0" * (at - end))
        for p in new:
            f.write(struct.pack("<IIQQQQQQ", *p))
        f.seek(32)
        f.write(struct.pack("<Q", at))
        f.seek(56)
        f.write(struct.pack("<H", len(new)))
    pids = []
    for off, b in segs:
        for name, typ, d, n in notes(b, 0, len(b)):
            if name == "CORE" and typ == NT_PRSTATUS:
                # elf_prstatus: siginfo 12, cursig 2 + pad 2, sigpend 8, sighold 8, pid
                pids.append(off + d + 32)
    return pids


def open_prog(path, debug):
    prog = drgn.Program()
    prog.set_core_dump(path)
    prog.load_debug_info(debug)
    return prog


def fmt_sym(prog, pc):
    try:
        s = prog.symbol(pc)
    except LookupError:
        return "-"
    return "%s+%#x/%#x" % (s.name, pc - s.address, s.size)


def walk(prog):
    """Prints every task's frames; returns the seconds (wall, CPU) the walk took."""
    t0, c0 = time.perf_counter(), time.process_time()
    for task in for_each_task(prog):
        comm = task.comm.string_().decode(errors="replace")
        print("task %d %s %#x" % (task.pid, comm, task.value_()))
        try:
            trace = prog.stack_trace(task)
        except Exception as e:  # drgn raises ValueError, FaultError, LookupError
            print("  error: %s" % (str(e).replace("\n", " "),))
            continue
        for i, f in enumerate(trace):
            try:
                pc = f.pc
            except LookupError as e:
                print("  #%d pc unknown: %s" % (i, e))
                continue
            try:
                src_file, line, _ = f.source()
                where = "%s:%d" % (src_file, line)
            except LookupError:
                where = "-"
            print("  #%d %#x %s%s %s %s" % (i, pc, fmt_sym(prog, pc), " inline" if f.is_inline else "",
                                           f.name or "-", where))
    return time.perf_counter() - t0, time.process_time() - c0


def main():
    args = sys.argv[1:]
    if args and args[0] == "-walk":
        # -walk COPY VMLINUX [MODULE.ko...]: only the walk, over a copy kept with DRGN_KEEP=1
        # (what the speed comparison times: README, "Performance").
        t0, c0 = time.perf_counter(), time.process_time()
        prog = open_prog(args[1], args[2:])
        t1, c1 = time.perf_counter(), time.process_time()
        w, c = walk(prog)
        print("drgn: open and load debug info %.3f s (CPU %.3f s), for_each_task + stack_trace + names %.3f s (CPU %.3f s)" % (
            t1 - t0, c1 - c0, w, c), file=sys.stderr)
        return
    if len(args) < 2:
        sys.exit(__doc__)
    src, vmlinux, mods = args[0], args[1], args[2:]
    tmp = os.environ.get("DRGN_TMP")
    dst = os.path.join(tmp, os.path.basename(src) + ".drgn") if tmp else src + ".drgn"
    pid_offs = write_copy(src, dst, vmlinux)
    prog = open_prog(dst, [vmlinux] + mods)
    pids = [int(per_cpu(prog["__entry_task"], cpu).pid) for cpu in range(len(pid_offs))]
    del prog
    with open(dst, "r+b") as f:
        for o, pid in zip(pid_offs, pids):
            f.seek(o)
            f.write(struct.pack("<i", pid))
    prog = open_prog(dst, [vmlinux] + mods)
    print("# drgn %s over %s (a copy with virtual PT_LOADs; pr_pid per CPU: %s)" % (
        drgn.__version__, os.path.basename(src), " ".join("cpu%d=%d" % c for c in enumerate(pids))))
    walk(prog)
    if not os.environ.get("DRGN_KEEP"):
        os.remove(dst)


if __name__ == "__main__":
    main()
