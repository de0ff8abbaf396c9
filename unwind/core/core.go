// Package core reads arm64 Linux ELF core files (ET_CORE) and unwinds every
// thread in them with both techniques: the shadow call stack copy and the
// frame-record walk.
//
// It follows the format Linux writes (fs/binfmt_elf.c elf_core_dump, the
// notes of arch/arm64/kernel/ptrace.c's regsets) and the subset qemu-user
// writes (linux-user/elfload.c: NT_PRSTATUS, NT_PRPSINFO, NT_AUXV):
//
//   - registers from NT_PRSTATUS (struct elf_prstatus, user_pt_regs at
//     offset 112: x0-x30, sp, pc, pstate), one per thread;
//   - memory from the PT_LOAD segments (a segment with p_filesz 0 existed
//     but was not dumped);
//   - file mappings from NT_FILE when present, else the dynamic linker's
//     link map (r_debug through the executable's DT_DEBUG);
//   - NT_AUXV (AT_PHDR, AT_ENTRY for a PIE's load bias; AT_HWCAP's PACA
//     and PACG bits);
//   - NT_ARM_GCS (Linux 6.13+ on a CPU with FEAT_GCS: struct user_gcs,
//     GCSPR_EL0 and the PR_SHADOW_STACK_* feature bits), one per thread,
//     after its NT_PRSTATUS; the Guarded Control Stack's pages are an
//     anonymous mapping like any other, in the PT_LOADs;
//   - NT_ARM_PAC_MASK (the PAC field of instruction pointers) and
//     NT_ARM_TAGGED_ADDR_CTRL. Without them the PAC field is Linux's
//     ptrauth_user_pac_mask() for a 48-bit user VA with top-byte-ignore,
//     bits 54:48, which is also what qemu-user uses; stripping it from an
//     unsigned user address changes nothing.
//
// The shadow call stack of a user program is wherever the program mapped
// it: its base is taken to be the start of the mapping that holds x18
// (user shadow stacks sit between guard pages), which is a guess that
// [Thread.SCSBaseGuessed] reports.
package core

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/unwindkit/unwindkit/internal/elfcore"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/unwind"
)

// Note types (include/uapi/linux/elf.h).
const (
	ntPRStatus      = 1
	ntPRPSInfo      = 3
	ntAuxv          = 6
	ntFile          = 0x46494c45
	ntARMPACMask    = 0x406
	ntARMTaggedCtrl = 0x409
	ntARMGCS        = 0x410
)

// userGCSSize is the size of NT_ARM_GCS's struct user_gcs
// (arch/arm64/include/uapi/asm/ptrace.h): features_enabled,
// features_locked, gcspr_el0, each a __u64.
const userGCSSize = 24

// GCS feature bits of [GCSRegs] (include/uapi/linux/prctl.h's
// PR_SHADOW_STACK_*, as prctl PR_GET_SHADOW_STACK_STATUS returns them).
const (
	GCSEnable = 1 << 0 // the thread's GCS is on: bl pushes, ret checks
	GCSWrite  = 1 << 1 // GCSSTR (user writes to the GCS) allowed
	GCSPush   = 1 << 2 // GCSPUSHM allowed
)

// GCSRegs is a thread's NT_ARM_GCS register set (struct user_gcs).
type GCSRegs struct {
	// FeaturesEnabled and FeaturesLocked are PR_SHADOW_STACK_* bits
	// (GCSEnable, GCSWrite, GCSPush).
	FeaturesEnabled, FeaturesLocked uint64
	// GCSPR is GCSPR_EL0: the newest entry of the GCS.
	GCSPR uint64
}

// Enabled reports whether the thread ran with its GCS on.
func (g GCSRegs) Enabled() bool { return g.FeaturesEnabled&GCSEnable != 0 }

// Auxiliary vector tags (include/uapi/linux/auxvec.h).
const (
	atPhdr   = 3
	atEntry  = 9
	atHwcap  = 16
	atHwcap2 = 26
)

// HWCAP bits for pointer authentication (arch/arm64/include/uapi/asm/hwcap.h).
const (
	HWCapPACA = 1 << 30 // address authentication (pac-ret works)
	HWCapPACG = 1 << 31 // generic authentication
)

// prstatus layout on arm64 (struct elf_prstatus).
const (
	prstatusSize   = 392
	prstatusSigOff = 12 // pr_cursig
	prstatusPIDOff = 32
	prstatusRegOff = 112
)

// Regs are a thread's registers from NT_PRSTATUS.
type Regs struct {
	X      [31]uint64 // x0-x30 (x29 frame pointer, x30 link register)
	SP, PC uint64
	Pstate uint64
}

// Thread is one thread of the core.
type Thread struct {
	// PID is the thread's id (pr_pid); Signal the signal being handled
	// when it dumped (pr_cursig).
	PID, Signal int
	Regs        Regs
	// SCSBase is the base of the shadow call stack x18 points into, when
	// HasSCS. SCSBaseGuessed says it is only the start of the mapping
	// holding x18 (always so for user-space cores, which record no
	// shadow call stack bounds); SCSGuarded says that mapping lies between
	// inaccessible mappings, as guarded shadow stacks do.
	SCSBase        uint64
	HasSCS         bool
	SCSBaseGuessed bool
	SCSGuarded     bool
	// SCSNote says why there is no shadow call stack, when HasSCS is false.
	SCSNote string
	// GCS is the thread's NT_ARM_GCS register set, when HasGCS. Linux
	// writes the note for every thread on a CPU with FEAT_GCS, whether
	// or not the thread enabled its GCS (GCS.Enabled).
	GCS    GCSRegs
	HasGCS bool
}

// Mapping is a file mapped into the process (NT_FILE, or the link map).
type Mapping struct {
	Start, End, FileOff uint64 // FileOff in bytes
	Path                string
}

// Segment describes one PT_LOAD of the core.
type Segment struct {
	Addr, Size uint64 // the mapping
	FileSize   uint64 // bytes present in the core (0: not dumped)
	Flags      uint32 // PF_X=1, PF_W=2, PF_R=4
}

// Core is an opened core file with its executable and libraries. Its
// methods may be called concurrently.
type Core struct {
	// Path is the core file's name as given.
	Path string
	// Threads are the threads, in note order (the first one is the one
	// that received the fatal signal for Linux and qemu-user).
	Threads []Thread
	// Aux is the auxiliary vector (NT_AUXV), tag to value.
	Aux map[uint64]uint64
	// Files are the file mappings from NT_FILE (nil when the core has
	// none: qemu-user writes none).
	Files []Mapping
	// Objects are the executable and shared objects found, with their
	// load bias and symbols.
	Objects []Object
	// Layout is the PAC layout of user-space instruction pointers;
	// LayoutFrom says where it came from.
	Layout     ptrauth.Layout
	LayoutFrom string
	// PACMaskData and PACMaskInsn are NT_ARM_PAC_MASK's masks, when
	// HasPACMask.
	PACMaskData, PACMaskInsn uint64
	HasPACMask               bool
	// TaggedAddrCtrl is NT_ARM_TAGGED_ADDR_CTRL's value (prctl
	// PR_GET_TAGGED_ADDR_CTRL), when HasTaggedAddrCtrl.
	TaggedAddrCtrl    uint64
	HasTaggedAddrCtrl bool
	// Command is NT_PRPSINFO's pr_psargs (empty without it).
	Command string
	// Warnings are non-fatal findings (a library not found, a link map
	// that could not be read), for the output.
	Warnings []string

	f      *elfcore.File
	sym    *unwind.Symbolizer
	mem    *memory
	closer io.Closer
}

// Open opens the core file at path with the executable exe and shared
// libraries libs (matched to the mappings by base name; any may be
// missing: their frames are then shown as addresses). The core's memory
// is read from the file when an unwind first needs it: Close the Core
// when done.
func Open(path, exe string, libs ...string) (*Core, error) {
	var objs []ObjectFile
	for _, p := range append([]string{exe}, libs...) {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		objs = append(objs, ObjectFile{Path: p, Data: b})
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	c, err := Load(path, fh, st.Size(), objs...)
	if err != nil {
		fh.Close()
		return nil, err
	}
	c.closer = fh
	return c, nil
}

// Close closes the file Open opened (a no-op for a Core from Load).
func (c *Core) Close() error {
	if c.closer != nil {
		return c.closer.Close()
	}
	return nil
}

// ObjectFile is an executable or shared library given by its bytes. The
// first one passed to Load is the executable.
type ObjectFile struct {
	Path string // the file's name, matched by base name to the mappings
	Data []byte // the file's contents
}

// Load reads the core r of size bytes (name is used in errors). The
// notes, the executable's and libraries' symbols and the segments holding
// each thread's sp, x29 and x18 are read now; other segments when an
// unwind first needs them, so r must stay readable while the Core is used.
//
// An object that is not a 64-bit little-endian ELF file, or whose symbol
// tables exceed the readers' bounds (a section compressed to more than 8
// times the object's size plus 32 MiB, a table outside the file), is a
// warning in [Core.Warnings], not an error: its frames are then shown as
// addresses. Names longer than 4096 bytes are cut to 4096, with a warning.
func Load(name string, r io.ReaderAt, size int64, objs ...ObjectFile) (*Core, error) {
	f, err := elfcore.Parse(name, r, size, false)
	if err != nil {
		return nil, err
	}
	c := &Core{Path: name, f: f, Aux: map[uint64]uint64{}}
	if err := c.readNotes(); err != nil {
		return nil, err
	}
	if len(c.Threads) == 0 {
		return nil, f.Errf("notes", 0, "no NT_PRSTATUS note: not a process core")
	}
	c.setLayout()
	c.mem = newMemory(f)
	for i := range c.Threads {
		t := &c.Threads[i]
		if err := c.findSCS(t); err != nil {
			return nil, err
		}
		for _, a := range []uint64{t.Regs.SP, t.Regs.X[29]} {
			if _, err := c.mem.ensure(a); err != nil {
				return nil, err
			}
		}
	}
	c.loadObjects(objs)
	return c, nil
}

func (c *Core) readNotes() error {
	le := binary.LittleEndian
	f := c.f
	auxSeen := false
	for i := range f.Notes {
		n := &f.Notes[i]
		d := n.Desc
		switch {
		case n.Name == "CORE" && n.Type == ntPRStatus:
			if len(d) != prstatusSize {
				return f.Errf(n.Part(), n.DescOff, "NT_PRSTATUS of %d bytes, want %d (arm64 elf_prstatus)", len(d), prstatusSize)
			}
			t := Thread{PID: int(int32(le.Uint32(d[prstatusPIDOff:]))), Signal: int(le.Uint16(d[prstatusSigOff:]))}
			for k := range 31 {
				t.Regs.X[k] = le.Uint64(d[prstatusRegOff+8*k:])
			}
			t.Regs.SP = le.Uint64(d[prstatusRegOff+31*8:])
			t.Regs.PC = le.Uint64(d[prstatusRegOff+32*8:])
			t.Regs.Pstate = le.Uint64(d[prstatusRegOff+33*8:])
			c.Threads = append(c.Threads, t)
		case n.Name == "LINUX" && n.Type == ntARMGCS:
			// A thread's regset notes follow its NT_PRSTATUS
			// (fs/binfmt_elf.c fill_thread_core_info).
			if len(c.Threads) == 0 {
				return f.Errf(n.Part(), n.DescOff, "NT_ARM_GCS before any NT_PRSTATUS: no thread to hold it")
			}
			t := &c.Threads[len(c.Threads)-1]
			if len(d) != userGCSSize {
				return f.Errf(n.Part(), n.DescOff, "NT_ARM_GCS of %d bytes for thread %d, want %d (struct user_gcs)", len(d), t.PID, userGCSSize)
			}
			if t.HasGCS {
				return f.Errf(n.Part(), n.DescOff, "second NT_ARM_GCS for thread %d", t.PID)
			}
			t.GCS = GCSRegs{FeaturesEnabled: le.Uint64(d), FeaturesLocked: le.Uint64(d[8:]), GCSPR: le.Uint64(d[16:])}
			t.HasGCS = true
			if t.GCS.Enabled() && t.GCS.GCSPR%8 != 0 {
				return f.Errf(n.Part(), n.DescOff+16, "NT_ARM_GCS gcspr_el0 %#x of thread %d is not 8-byte aligned", t.GCS.GCSPR, t.PID)
			}
		case n.Name == "CORE" && n.Type == ntPRPSInfo:
			if len(d) != 136 {
				return f.Errf(n.Part(), n.DescOff, "NT_PRPSINFO of %d bytes, want 136", len(d))
			}
			c.Command = cString(d[56:136])
		case n.Name == "CORE" && n.Type == ntAuxv:
			if auxSeen {
				continue
			}
			auxSeen = true
			if len(d)%16 != 0 {
				return f.Errf(n.Part(), n.DescOff, "NT_AUXV of %d bytes is not a whole number of (tag, value) pairs", len(d))
			}
			for k := 0; k+16 <= len(d); k += 16 {
				tag := le.Uint64(d[k:])
				if tag == 0 {
					break
				}
				c.Aux[tag] = le.Uint64(d[k+8:])
			}
		case n.Name == "CORE" && n.Type == ntFile:
			if c.Files != nil {
				continue
			}
			fs, err := parseNTFile(f, n)
			if err != nil {
				return err
			}
			c.Files = fs
		case n.Name == "LINUX" && n.Type == ntARMPACMask:
			if len(d) != 16 {
				return f.Errf(n.Part(), n.DescOff, "NT_ARM_PAC_MASK of %d bytes, want 16", len(d))
			}
			if !c.HasPACMask {
				c.PACMaskData, c.PACMaskInsn, c.HasPACMask = le.Uint64(d), le.Uint64(d[8:]), true
			}
		case n.Name == "LINUX" && n.Type == ntARMTaggedCtrl:
			if len(d) != 8 {
				return f.Errf(n.Part(), n.DescOff, "NT_ARM_TAGGED_ADDR_CTRL of %d bytes, want 8", len(d))
			}
			if !c.HasTaggedAddrCtrl {
				c.TaggedAddrCtrl, c.HasTaggedAddrCtrl = le.Uint64(d), true
			}
		}
	}
	return nil
}

// parseNTFile decodes NT_FILE: count, page size, count (start, end,
// page offset) triples, then count NUL-terminated names.
func parseNTFile(f *elfcore.File, n *elfcore.Note) ([]Mapping, error) {
	le := binary.LittleEndian
	d := n.Desc
	if len(d) < 16 {
		return nil, f.Errf(n.Part(), n.DescOff, "NT_FILE of %d bytes is shorter than its header", len(d))
	}
	count, page := le.Uint64(d), le.Uint64(d[8:])
	if count > uint64(len(d)-16)/24 {
		return nil, f.Errf(n.Part(), n.DescOff, "NT_FILE count %d does not fit in %d bytes", count, len(d))
	}
	if page == 0 || page&(page-1) != 0 || page > 1<<30 {
		return nil, f.Errf(n.Part(), n.DescOff+8, "NT_FILE page size %#x is not a power of two", page)
	}
	names := d[16+24*count:]
	out := make([]Mapping, 0, count)
	for i := uint64(0); i < count; i++ {
		e := d[16+24*i:]
		m := Mapping{Start: le.Uint64(e), End: le.Uint64(e[8:]), FileOff: le.Uint64(e[16:])}
		if m.End < m.Start {
			return nil, f.Errf(n.Part(), n.DescOff+16+24*int64(i), "NT_FILE entry %d: end %#x below start %#x", i, m.End, m.Start)
		}
		if m.FileOff > ^uint64(0)/page {
			return nil, f.Errf(n.Part(), n.DescOff+16+24*int64(i), "NT_FILE entry %d: page offset %#x overflows", i, m.FileOff)
		}
		m.FileOff *= page
		k := 0
		for k < len(names) && names[k] != 0 {
			k++
		}
		if k == len(names) {
			return nil, f.Errf(n.Part(), n.DescOff+int64(len(d)-len(names)), "NT_FILE entry %d: name missing or not NUL-terminated", i)
		}
		m.Path = string(names[:k])
		names = names[k+1:]
		out = append(out, m)
	}
	return out, nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// setLayout picks the PAC layout: NT_ARM_PAC_MASK's instruction mask when
// present, else bits 54:48 with top-byte-ignore (Linux's user default).
func (c *Core) setLayout() {
	c.Layout, c.LayoutFrom = ptrauth.NewLayout(48, true), "default: 48-bit user VA with TBI (PAC bits 54:48; no NT_ARM_PAC_MASK)"
	if !c.HasPACMask {
		return
	}
	m := c.PACMaskInsn &^ (1 << 55)
	low := 0
	for low < 64 && m&(1<<low) == 0 {
		low++
	}
	tbi := m>>56 == 0
	if low < 16 || low > 52 {
		c.Warnings = append(c.Warnings, fmt.Sprintf("NT_ARM_PAC_MASK insn mask %#x has no usable VA size; using the default", c.PACMaskInsn))
		return
	}
	h := ptrauth.Half{VABits: low, TBI: tbi}
	l, err := ptrauth.NewLayoutHalves(h, h, ptrauth.PAuth2)
	if err != nil {
		return
	}
	c.Layout = l
	c.LayoutFrom = fmt.Sprintf("NT_ARM_PAC_MASK insn %#x: %d-bit VA, TBI %v", c.PACMaskInsn, low, tbi)
}

// Segments describes the core's PT_LOADs in address order.
func (c *Core) Segments() []Segment {
	var out []Segment
	for _, p := range c.f.Loads {
		out = append(out, Segment{Addr: p.VAddr, Size: p.MemSz, FileSize: p.FileSz, Flags: p.Flags})
	}
	return out
}

// HWCap returns AT_HWCAP and AT_HWCAP2 (0 when absent).
func (c *Core) HWCap() (hwcap, hwcap2 uint64) { return c.Aux[atHwcap], c.Aux[atHwcap2] }

// ReadAt reads len(b) bytes of the process's memory at addr from the core.
// It fails for addresses the core does not hold.
func (c *Core) ReadAt(b []byte, addr uint64) error { return c.f.ReadAt(b, addr) }

// Trim writes a copy of the core r of size bytes (name is used in errors)
// to w, holding every note but only the bytes of the given address ranges
// ([start, end) pairs) of its memory; the rest of each segment stays as a
// segment with no bytes in the file, so the result is still an ELF core
// that gdb reads.
func Trim(w io.Writer, name string, r io.ReaderAt, size int64, keep [][2]uint64) error {
	f, err := elfcore.Parse(name, r, size, false)
	if err != nil {
		return err
	}
	var rs []elfcore.Range
	for _, k := range keep {
		rs = append(rs, elfcore.Range{Start: k[0], End: k[1]})
	}
	return elfcore.WriteTrimmed(w, f, rs)
}

// ErrNotHeld says an address is not in the core's memory.
var ErrNotHeld = elfcore.ErrNotHeld
