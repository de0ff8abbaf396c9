// Package vmcore reads arm64 Linux kernel crash dumps in ELF form: what
// QEMU's dump-guest-memory monitor command writes for a guest
// (dump/dump.c: one PT_LOAD per RAM block at its physical address, one
// NT_PRSTATUS per CPU, the guest's VMCOREINFO note when it loaded the
// fw_cfg driver and the VM has -device vmcoreinfo) and the same format
// /proc/vmcore gives after a kdump (fs/proc/vmcore.c).
//
// It reads VMCOREINFO (kernel/vmcore_info.c and
// arch/arm64/kernel/vmcore_info.c: OSRELEASE, PAGESIZE, NUMBER(VA_BITS),
// NUMBER(TCR_EL1_T1SZ), NUMBER(kimage_voffset), NUMBER(PHYS_OFFSET),
// NUMBER(KERNELPACMASK), KERNELOFFSET, SYMBOL(swapper_pg_dir) and the
// kallsyms tables), derives PAGE_OFFSET from the VA size, translates
// kernel virtual addresses through the kernel's page tables from
// swapper_pg_dir (4K/16K/64K granules, 39- to 52-bit VAs, FEAT_LPA2
// descriptors), decodes the kallsyms tables in the dump or parses
// /proc/kallsyms text, and reads structure offsets from the kernel's BTF
// (with a per-version table as fallback), saying where each came from.
//
// It also reads /proc/kcore (fs/proc/kcore.c), the running kernel as an
// ELF core whose PT_LOADs are kernel virtual ranges (the linear map, the
// image, vmalloc and the module area; p_paddr is -1 outside the linear
// map) with one empty NT_PRSTATUS, an NT_TASKSTRUCT copy of the reader's
// task_struct and the VMCOREINFO note: see [Vmcore.Virtual] and
// [Vmcore.Live].
//
// # What a live read promises
//
// /proc/kcore is the running kernel's memory: every read is a new moment
// (fs/proc/kcore.c copies each range when it is read, with no lock
// against the code that changes it). This package promises only that
// each ReadVirt or ReadPhys call returns the bytes the kernel copied
// during that call, and nothing about two calls: a structure read in two
// calls may mix two moments. Package unwind/kernel builds consistent
// task walks on top of it (Kernel.TaskWalkLive). [Vmcore.KeepReads] keeps
// what the reads returned, each byte as last read, so that
// [Vmcore.WriteTrimmed] writes a snapshot of what the walks saw: a task
// walked consistently has its bytes in it as that walk read them.
//
// Every physical page read can be recorded ([Vmcore.RecordReads]), and
// [Vmcore.WriteTrimmed] writes a still-valid ELF vmcore keeping only given
// physical ranges plus every note: what a capture needs to ship only the
// memory its unwinding read.
package vmcore

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/unwindkit/unwindkit/internal/elfcore"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// ErrCorrupt is unwindkit's shared sentinel for malformed input: every
// format error of this package wraps it.
var ErrCorrupt = errs.ErrCorrupt

// Regs are a CPU's registers from its NT_PRSTATUS.
type Regs struct {
	X      [31]uint64 // x0-x30
	SP, PC uint64
	Pstate uint64
}

// CPU is one CPU of the dump, in note order.
type CPU struct {
	// PID is pr_pid: QEMU writes the CPU index + 1; the kernel's crash
	// notes hold the task's pid.
	PID  int
	Regs Regs
}

// Info is the parsed VMCOREINFO note.
type Info struct {
	// Raw holds every KEY=VALUE line, e.g. Raw["SYMBOL(swapper_pg_dir)"].
	Raw map[string]string
	// OSRelease is the kernel release, e.g. "6.1.0-50-cloud-arm64";
	// Major and Minor are its first two numbers.
	OSRelease    string
	Major, Minor int
	// PageSize is PAGESIZE in bytes.
	PageSize uint64
	// VABits is NUMBER(VA_BITS), the configured kernel VA size;
	// VABitsActual is 64 - NUMBER(TCR_EL1_T1SZ) (VABits without it),
	// never above VABits (Load rejects such a dump).
	VABits, VABitsActual int
	// KimageVoffset, PhysOffset, KernelOffset and KernelPACMask are
	// NUMBER(kimage_voffset), NUMBER(PHYS_OFFSET), KERNELOFFSET and
	// NUMBER(KERNELPACMASK) (0 without pointer authentication).
	KimageVoffset, PhysOffset, KernelOffset, KernelPACMask uint64
	// SwapperPgDir is SYMBOL(swapper_pg_dir).
	SwapperPgDir uint64
}

// Symbol returns SYMBOL(name) and whether it is present.
func (in *Info) Symbol(name string) (uint64, bool) {
	v, ok := in.Raw["SYMBOL("+name+")"]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 16, 64)
	return n, err == nil
}

// Number returns NUMBER(name) (decimal, or hex with 0x, as the kernel
// prints them) and whether it is present and well formed.
func (in *Info) Number(name string) (uint64, bool) {
	v, ok := in.Raw["NUMBER("+name+")"]
	if !ok {
		return 0, false
	}
	return parseNum(v)
}

func parseNum(v string) (uint64, bool) {
	if strings.HasPrefix(v, "-") {
		n, err := strconv.ParseInt(v, 10, 64)
		return uint64(n), err == nil
	}
	n, err := strconv.ParseUint(v, 0, 64)
	return n, err == nil
}

// Vmcore is an opened kernel dump.
type Vmcore struct {
	// Path is the file's name as given.
	Path string
	CPUs []CPU
	// Info is the VMCOREINFO note; HasInfo is false without one (then
	// only physical reads work).
	Info    Info
	HasInfo bool
	// PageOffset is PAGE_OFFSET, the start of the linear map, derived
	// from the VA size (VMCOREINFO does not carry it).
	PageOffset uint64
	// Layout is the PAC layout of kernel (upper half) and user (lower
	// half) instruction pointers, from KERNELPACMASK and the VA sizes.
	Layout ptrauth.Layout
	// Virtual is set for a dump in /proc/kcore's format: its PT_LOADs
	// are kernel virtual ranges, read directly (ReadVirt) without the
	// page tables, and physical reads go through the linear map. Its
	// CPUs are empty: /proc/kcore's NT_PRSTATUS holds no registers.
	Virtual bool
	// Live is set when the file is the running kernel's memory
	// (/proc/kcore itself, opened with Open on procfs): every read may
	// see a different moment, see [Vmcore.KeepReads].
	Live bool
	// TaskStruct is the NT_TASKSTRUCT note of /proc/kcore: a copy of the
	// reading task's task_struct at the moment the headers were read
	// (nil for other dumps).
	TaskStruct []byte

	f       *elfcore.File
	infoOff int64 // file offset of VMCOREINFO's text
	kept    *keepingReader
	closer  io.Closer
	tr      translator

	recMu  sync.Mutex
	rec    bool
	pages  map[uint64]struct{}
	recCnt int
}

// Open opens the vmcore at path. Its memory is read from the file on
// demand: Close it when done.
func Open(path string) (*Vmcore, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	v, err := Load(path, fh, st.Size())
	if err != nil {
		fh.Close()
		return nil, err
	}
	v.closer = fh
	v.Live = v.Virtual && onProcfs(fh)
	return v, nil
}

// Close closes the file Open opened.
func (v *Vmcore) Close() error {
	if v.closer != nil {
		return v.closer.Close()
	}
	return nil
}

const (
	prstatusSize   = 392
	prstatusPIDOff = 32
	prstatusRegOff = 112
	// maxInfo bounds the VMCOREINFO note (the kernel's is one page).
	maxInfo = 1 << 16
)

// Load reads the vmcore r of size bytes (name is used in errors). r must
// stay readable while the Vmcore is used.
//
// A file in /proc/kcore's format (an NT_TASKSTRUCT note, PT_LOADs at
// kernel virtual addresses) is read as such ([Vmcore.Virtual]).
func Load(name string, r io.ReaderAt, size int64) (*Vmcore, error) {
	f, err := elfcore.Parse(name, r, size, true)
	virtual := false
	if err != nil || hasTaskStruct(f) {
		// /proc/kcore: p_paddr is -1 for every range outside the linear
		// map (so they overlap physically); read it by p_vaddr.
		if fv, verr := elfcore.ParseShared(name, r, size); verr == nil && hasTaskStruct(fv) {
			f, err, virtual = fv, nil, true
		}
	}
	if err != nil {
		return nil, err
	}
	v := &Vmcore{Path: name, f: f, Virtual: virtual}
	le := binary.LittleEndian
	for i := range f.Notes {
		n := &f.Notes[i]
		switch {
		case n.Name == "CORE" && n.Type == ntTaskStruct && virtual:
			if v.TaskStruct == nil {
				v.TaskStruct = n.Desc
			}
		case n.Name == "CORE" && n.Type == 1 && virtual:
			// /proc/kcore's one NT_PRSTATUS is zeroed: no CPU's
			// registers (checked: a non-zero one is refused).
			for _, c := range n.Desc {
				if c != 0 {
					return nil, f.Errf(n.Part(), n.DescOff, "NT_PRSTATUS of a /proc/kcore-format file is not zero: registers in a live dump are not supported")
				}
			}
		case n.Name == "CORE" && n.Type == 1:
			if len(n.Desc) != prstatusSize {
				return nil, f.Errf(n.Part(), n.DescOff, "NT_PRSTATUS of %d bytes, want %d (arm64 elf_prstatus)", len(n.Desc), prstatusSize)
			}
			c := CPU{PID: int(int32(le.Uint32(n.Desc[prstatusPIDOff:])))}
			r := n.Desc[prstatusRegOff:]
			for k := range 31 {
				c.Regs.X[k] = le.Uint64(r[8*k:])
			}
			c.Regs.SP, c.Regs.PC, c.Regs.Pstate = le.Uint64(r[31*8:]), le.Uint64(r[32*8:]), le.Uint64(r[33*8:])
			v.CPUs = append(v.CPUs, c)
		case n.Name == "VMCOREINFO":
			if v.HasInfo {
				continue
			}
			if len(n.Desc) > maxInfo {
				return nil, f.Errf(n.Part(), n.DescOff, "VMCOREINFO of %d bytes (limit %d)", len(n.Desc), maxInfo)
			}
			v.infoOff = n.DescOff
			if err := v.parseInfo(n); err != nil {
				return nil, err
			}
			v.HasInfo = true
		}
	}
	if len(v.CPUs) == 0 && !virtual {
		return nil, f.Errf("notes", 0, "no NT_PRSTATUS note: no CPU registers")
	}
	if virtual && !v.HasInfo {
		return nil, f.Errf("notes", 0, "no VMCOREINFO note in a /proc/kcore-format file: kernel version and layout unknown")
	}
	if v.HasInfo {
		if err := v.setup(); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (v *Vmcore) parseInfo(n *elfcore.Note) error {
	f := v.f
	in := &v.Info
	in.Raw = map[string]string{}
	at := map[string]int64{} // file offset of each key's line
	off := n.DescOff
	for _, line := range strings.Split(string(n.Desc), "\n") {
		lineOff := off
		off += int64(len(line)) + 1
		line = strings.TrimRight(line, "\x00\r")
		if line == "" {
			continue
		}
		k, val, ok := strings.Cut(line, "=")
		if !ok {
			return f.Errf(n.Part(), lineOff, "VMCOREINFO line %q has no '='", line)
		}
		in.Raw[k] = val
		at[k] = lineOff
	}
	// lineAt is the offset of key's line, or of the note's text without it.
	lineAt := func(key string) int64 {
		if o, ok := at[key]; ok {
			return o
		}
		return n.DescOff
	}
	bad := func(key string) error {
		return f.Errf(n.Part(), lineAt(key), "VMCOREINFO %s=%q is missing or malformed", key, in.Raw[key])
	}
	in.OSRelease = in.Raw["OSRELEASE"]
	fmt.Sscanf(in.OSRelease, "%d.%d", &in.Major, &in.Minor)
	ps, err := strconv.ParseUint(in.Raw["PAGESIZE"], 10, 64)
	if err != nil || (ps != 4096 && ps != 16384 && ps != 65536) {
		return bad("PAGESIZE")
	}
	in.PageSize = ps
	va, ok := in.Number("VA_BITS")
	if !ok || va < 36 || va > 52 {
		return bad("NUMBER(VA_BITS)")
	}
	in.VABits, in.VABitsActual = int(va), int(va)
	if t1, ok := in.Number("TCR_EL1_T1SZ"); ok {
		if t1 < 12 || t1 > 39 {
			return bad("NUMBER(TCR_EL1_T1SZ)")
		}
		in.VABitsActual = 64 - int(t1)
		// The VA size in use is at most the configured one (a 52-bit
		// kernel may run with 48, never the reverse): a smaller
		// VA_BITS would put PAGE_OFFSET inside the VA space in use.
		if in.VABitsActual > in.VABits {
			return f.Errf(n.Part(), lineAt("NUMBER(VA_BITS)"), "VMCOREINFO NUMBER(VA_BITS)=%s is below the VA size in use, %d bits from NUMBER(TCR_EL1_T1SZ)=%s (at offset %#x)",
				in.Raw["NUMBER(VA_BITS)"], in.VABitsActual, in.Raw["NUMBER(TCR_EL1_T1SZ)"], lineAt("NUMBER(TCR_EL1_T1SZ)"))
		}
	}
	if in.KimageVoffset, ok = in.Number("kimage_voffset"); !ok {
		return bad("NUMBER(kimage_voffset)")
	}
	if in.PhysOffset, ok = in.Number("PHYS_OFFSET"); !ok {
		return bad("NUMBER(PHYS_OFFSET)")
	}
	if s, ok := in.Raw["KERNELOFFSET"]; ok {
		if in.KernelOffset, err = strconv.ParseUint(s, 16, 64); err != nil {
			return bad("KERNELOFFSET")
		}
	}
	if _, has := in.Raw["NUMBER(KERNELPACMASK)"]; has {
		if in.KernelPACMask, ok = in.Number("KERNELPACMASK"); !ok {
			return bad("NUMBER(KERNELPACMASK)")
		}
	}
	if in.SwapperPgDir, ok = in.Symbol("swapper_pg_dir"); !ok {
		return bad("SYMBOL(swapper_pg_dir)")
	}
	return nil
}

// setup derives PAGE_OFFSET, the PAC layout and the translation regime.
func (v *Vmcore) setup() error {
	in := &v.Info
	// Since 5.4 ("arm64: mm: Flip kernel VA space") the linear map is the
	// lower half of the kernel VA space: PAGE_OFFSET = -(1 << VA_BITS).
	// Before, it was the upper half: -(1 << (VA_BITS - 1)). A 52-bit
	// kernel on 48-bit hardware keeps PAGE_OFFSET and moves memstart_addr
	// (NUMBER(PHYS_OFFSET) is that moved value).
	if in.Major > 5 || in.Major == 5 && in.Minor >= 4 || in.Major == 0 {
		v.PageOffset = -(uint64(1) << in.VABits)
	} else {
		v.PageOffset = -(uint64(1) << (in.VABits - 1))
	}
	upper := ptrauth.Half{VABits: in.VABitsActual}
	if m := in.KernelPACMask &^ (1 << 55); m != 0 {
		low := 0
		for m&(1<<low) == 0 {
			low++
		}
		if low >= 16 && low <= 52 {
			upper.VABits = low
		}
		upper.TBI = m>>56 == 0
	}
	l, err := ptrauth.NewLayoutHalves(ptrauth.Half{VABits: 48, TBI: true}, upper, ptrauth.PAuth2)
	if err != nil {
		return v.f.Errf("VMCOREINFO", v.infoOff, "%v", err)
	}
	v.Layout = l
	return v.tr.init(v)
}

// recordPage notes a physical page read.
func (v *Vmcore) recordRange(pa, n uint64) {
	v.recMu.Lock()
	defer v.recMu.Unlock()
	if !v.rec {
		return
	}
	ps := v.pageSize()
	for p := pa &^ (ps - 1); p < pa+n && p >= pa&^(ps-1); p += ps {
		v.pages[p] = struct{}{}
	}
}

func (v *Vmcore) pageSize() uint64 {
	if v.Info.PageSize != 0 {
		return v.Info.PageSize
	}
	return 4096
}

// RecordReads starts (on) or stops recording the physical pages read.
// Starting clears what was recorded.
func (v *Vmcore) RecordReads(on bool) {
	v.recMu.Lock()
	defer v.recMu.Unlock()
	v.rec = on
	if on {
		v.pages = map[uint64]struct{}{}
	}
}

// PagesRead returns the physical addresses of the pages read (of the dump's
// page size) since RecordReads(true), sorted; in a [Vmcore.Virtual] dump
// the virtual ones.
func (v *Vmcore) PagesRead() []uint64 {
	v.recMu.Lock()
	defer v.recMu.Unlock()
	out := make([]uint64, 0, len(v.pages))
	for p := range v.pages {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ReadPhys reads len(b) bytes of physical memory at pa. Memory the dump
// does not hold is an error. A [Vmcore.Virtual] dump is read at pa's
// linear-map address.
func (v *Vmcore) ReadPhys(b []byte, pa uint64) error {
	if v.Virtual {
		if !v.HasInfo || pa < v.Info.PhysOffset || pa-v.Info.PhysOffset >= 1<<(v.Info.VABits-1) {
			return fmt.Errorf("%s: pa %#x: outside the linear map of a /proc/kcore-format file", v.Path, pa)
		}
		return v.readFile(b, v.PhysToLinear(pa))
	}
	v.recordRange(pa, uint64(len(b)))
	return v.f.ReadAt(b, pa)
}

// readFile reads b at addr of the file's own address space (virtual in a
// Virtual dump), recording the pages.
func (v *Vmcore) readFile(b []byte, addr uint64) error {
	v.recordRange(addr, uint64(len(b)))
	return v.f.ReadAt(b, addr)
}

// ReadPhys64 reads the little-endian word at pa.
func (v *Vmcore) ReadPhys64(pa uint64) (uint64, error) {
	var b [8]byte
	if err := v.ReadPhys(b[:], pa); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// PhysRange is the physical range [Start, End) (virtual in a
// [Vmcore.Virtual] dump).
type PhysRange struct {
	Start uint64 // first byte
	End   uint64 // one past the last byte
}

// WriteTrimmed writes to w an ELF vmcore with every note of v but only
// the bytes of its memory inside keep; the rest of each PT_LOAD stays as a
// segment without bytes in the file. The result loads with this package
// and keeps every physical address where it was.
//
// While [Vmcore.KeepReads] is on, the bytes written are the kept copy.
func (v *Vmcore) WriteTrimmed(w io.Writer, keep []PhysRange) error {
	rs := make([]elfcore.Range, len(keep))
	for i, k := range keep {
		rs[i] = elfcore.Range{Start: k.Start, End: k.End}
	}
	f := v.f
	if v.kept != nil {
		c := *v.f
		c.R = keptAt{v.kept}
		f = &c
	}
	return elfcore.WriteTrimmed(w, f, rs)
}

// PagesToRanges turns page addresses (as PagesRead returns them) into
// ranges of the dump's page size, merged.
func (v *Vmcore) PagesToRanges(pages []uint64) []PhysRange {
	ps := v.pageSize()
	var rs []elfcore.Range
	for _, p := range pages {
		rs = append(rs, elfcore.Range{Start: p, End: p + ps})
	}
	var out []PhysRange
	for _, r := range elfcore.Normalize(rs) {
		out = append(out, PhysRange{r.Start, r.End})
	}
	return out
}
