package vmcore

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// KSym is a kernel symbol: Type is kallsyms' type letter ('T', 't', 'D',
// ...); Size is the distance to the next symbol's address (0 for the
// last), as the kernel's own kallsyms_lookup_size_offset computes it;
// Module is the module of a symbol /proc/kallsyms lists with "[MODULE]"
// ("" for the kernel image), whose Size is the distance to the next
// symbol of the same module (the kernel also bounds it by the end of the
// module's text, which /proc/kallsyms does not show).
type KSym struct {
	Name   string
	Addr   uint64
	Type   byte
	Size   uint64
	Module string
}

// Limits on the kallsyms tables read from a dump.
const (
	maxKallsyms     = 1 << 22 // symbols
	maxKallsymsName = 1024    // expanded name bytes (KSYM_NAME_LEN is 512)
	// The names expand to at most kallsymsRatio times the bytes of
	// kallsyms_names read so far, plus kallsymsSlack, and to at most
	// maxKallsymsBytes in all: the kernel's token table makes them about
	// 2-3 times as long (Debian's 6.1 and 6.12: see TestRealVmcores),
	// where one symbol of one 1,024-byte token would be 512 times.
	kallsymsRatio    = 16
	kallsymsSlack    = 64 << 10
	maxKallsymsBytes = 64 << 20
	// Each symbol takes at least kallsymsSymBytes of the dump: 4 of
	// kallsyms_offsets and at least 2 of kallsyms_names.
	kallsymsSymBytes = 6
)

// Kallsyms decodes the kernel's compressed symbol table from the dump
// (kernel/kallsyms.c: kallsyms_num_syms, kallsyms_names with one- or
// two-byte lengths, kallsyms_token_table/_index, kallsyms_offsets relative
// to kallsyms_relative_base), at the addresses VMCOREINFO gives. The
// symbols are sorted by address.
func (v *Vmcore) Kallsyms() ([]KSym, error) {
	syms, _, err := v.kallsyms()
	return syms, err
}

// kallsymsStats are the bytes of kallsyms_names a decoding read and the
// bytes of the names they expanded to.
type kallsymsStats struct{ read, expanded int }

func (v *Vmcore) kallsyms() (out []KSym, st kallsymsStats, err error) {
	if !v.HasInfo {
		return nil, st, fmt.Errorf("%s: no VMCOREINFO: kallsyms tables unknown", v.Path)
	}
	addr := map[string]uint64{}
	for _, s := range []string{"kallsyms_num_syms", "kallsyms_names", "kallsyms_token_table", "kallsyms_token_index", "kallsyms_offsets", "kallsyms_relative_base"} {
		a, ok := v.Info.Symbol(s)
		if !ok {
			return nil, st, fmt.Errorf("%s: VMCOREINFO lacks SYMBOL(%s)", v.Path, s)
		}
		addr[s] = a
	}
	le := binary.LittleEndian
	var b4 [4]byte
	if err := v.ReadVirt(b4[:], addr["kallsyms_num_syms"]); err != nil {
		return nil, st, readErr("kallsyms_num_syms", addr["kallsyms_num_syms"], err)
	}
	num := le.Uint32(b4[:])
	if num == 0 || num > maxKallsyms || int64(num)*kallsymsSymBytes > v.f.Size {
		return nil, st, fmt.Errorf("%s: %w: kallsyms_num_syms at %#x: %d outside [1, %d] or more than the dump's %d bytes can hold (%d bytes a symbol)",
			v.Path, ErrCorrupt, addr["kallsyms_num_syms"], num, maxKallsyms, v.f.Size, kallsymsSymBytes)
	}
	base, err := v.ReadVirt64(addr["kallsyms_relative_base"])
	if err != nil {
		return nil, st, readErr("kallsyms_relative_base", addr["kallsyms_relative_base"], err)
	}
	idx := make([]byte, 512)
	if err := v.ReadVirt(idx, addr["kallsyms_token_index"]); err != nil {
		return nil, st, readErr("kallsyms_token_index", addr["kallsyms_token_index"], err)
	}
	var maxIdx uint16
	for i := range 256 {
		maxIdx = max(maxIdx, le.Uint16(idx[2*i:]))
	}
	// The token table ends with the NUL of the token at the largest
	// index; tokens are short, so read that plus a margin.
	tt := make([]byte, int(maxIdx)+256)
	if err := v.readVirtUpTo(tt, addr["kallsyms_token_table"]); err != nil {
		return nil, st, readErr("kallsyms_token_table", addr["kallsyms_token_table"], err)
	}
	var tokens [256]string
	for i := range 256 {
		o := int(le.Uint16(idx[2*i:]))
		e := o
		for e < len(tt) && tt[e] != 0 {
			e++
		}
		if e == len(tt) {
			return nil, st, fmt.Errorf("%s: %w: kallsyms_token_table at %#x: token %d at offset %d is not NUL-terminated within %d bytes", v.Path, ErrCorrupt, addr["kallsyms_token_table"], i, o, len(tt))
		}
		tokens[i] = string(tt[o:e])
	}
	offs := make([]byte, 4*int(num))
	if err := v.ReadVirt(offs, addr["kallsyms_offsets"]); err != nil {
		return nil, st, readErr("kallsyms_offsets", addr["kallsyms_offsets"], err)
	}
	names := &virtStream{v: v, va: addr["kallsyms_names"]}
	out = make([]KSym, 0, min(int(num), 1<<16))
	var sb strings.Builder
	var expanded int // bytes of the names before symbol i
	for i := range int(num) {
		at := names.va - uint64(len(names.buf)) // symbol i's entry
		n, err := names.byte()
		if err != nil {
			return out, st, readErr(fmt.Sprintf("kallsyms_names, symbol %d", i), at, err)
		}
		ln := int(n)
		if n&0x80 != 0 {
			hi, err := names.byte()
			if err != nil {
				return out, st, readErr(fmt.Sprintf("kallsyms_names, symbol %d", i), at, err)
			}
			ln = int(n&0x7f) | int(hi)<<7
		}
		sb.Reset()
		for range ln {
			t, err := names.byte()
			if err != nil {
				return out, st, readErr(fmt.Sprintf("kallsyms_names, symbol %d", i), at, err)
			}
			n := sb.Len() + len(tokens[t])
			if n > maxKallsymsName {
				return out, st, fmt.Errorf("%s: %w: kallsyms_names at %#x: symbol %d expands beyond %d bytes", v.Path, ErrCorrupt, at, i, maxKallsymsName)
			}
			if read := int(names.read); expanded+n > min(maxKallsymsBytes, kallsymsRatio*read+kallsymsSlack) {
				return out, st, fmt.Errorf("%s: %w: kallsyms_names at %#x: symbol %d: %d bytes of names read would expand to %d, more than %d times as many plus %d (at most %d)",
					v.Path, ErrCorrupt, at, i, read, expanded+n, kallsymsRatio, kallsymsSlack, maxKallsymsBytes)
			}
			sb.WriteString(tokens[t])
		}
		expanded += sb.Len()
		s := sb.String()
		if s == "" {
			return out, st, fmt.Errorf("%s: %w: kallsyms_names at %#x: symbol %d is empty", v.Path, ErrCorrupt, at, i)
		}
		out = append(out, KSym{Type: s[0], Name: s[1:], Addr: base + uint64(le.Uint32(offs[4*i:]))})
	}
	SortSizes(out)
	return out, kallsymsStats{read: int(names.read), expanded: expanded}, nil
}

// readErr is the error of reading field at va: err names the dump (the
// errors of ReadVirt do).
func readErr(field string, va uint64, err error) error {
	return fmt.Errorf("%s at %#x: %w", field, va, err)
}

// readVirtUpTo reads b at va, accepting a short read when the end runs
// into unmapped memory (zeroing the rest).
func (v *Vmcore) readVirtUpTo(b []byte, va uint64) error {
	ps := v.pageSize()
	first := true
	for len(b) > 0 {
		n := min(uint64(len(b)), ps-va%ps)
		if err := v.ReadVirt(b[:n], va); err != nil {
			if first {
				return err
			}
			clear(b)
			return nil
		}
		first = false
		b, va = b[n:], va+n
	}
	return nil
}

// virtStream reads bytes sequentially from kernel virtual memory a page at
// a time.
type virtStream struct {
	v    *Vmcore
	va   uint64 // of the byte after buf
	buf  []byte
	read uint64 // bytes returned
}

func (s *virtStream) byte() (byte, error) {
	if len(s.buf) == 0 {
		ps := s.v.pageSize()
		s.buf = make([]byte, ps-s.va%ps)
		if err := s.v.ReadVirt(s.buf, s.va); err != nil {
			s.buf = nil
			return 0, err
		}
		s.va += uint64(len(s.buf))
	}
	c := s.buf[0]
	s.buf = s.buf[1:]
	s.read++
	return c, nil
}

// ParseKallsyms reads /proc/kallsyms text ("ADDR TYPE NAME [MODULE]" per
// line), sorted by address with sizes from the next symbol.
func ParseKallsyms(r io.Reader) ([]KSym, error) {
	var out []KSym
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<16)
	for ln := 1; sc.Scan(); ln++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 || len(f) > 4 || len(f[1]) != 1 {
			return nil, fmt.Errorf("kallsyms line %d: %q is not ADDR TYPE NAME [MODULE]", ln, sc.Text())
		}
		var mod string
		if len(f) == 4 {
			if len(f[3]) < 3 || f[3][0] != '[' || f[3][len(f[3])-1] != ']' {
				return nil, fmt.Errorf("kallsyms line %d: module %q is not [NAME]", ln, f[3])
			}
			mod = f[3][1 : len(f[3])-1]
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("kallsyms line %d: address %q: %v", ln, f[0], err)
		}
		out = append(out, KSym{Name: f[2], Addr: a, Type: f[1][0], Module: mod})
		if len(out) > maxKallsyms {
			return nil, fmt.Errorf("kallsyms line %d: more than %d symbols", ln, maxKallsyms)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	SortSizes(out)
	return out, nil
}

// SortSizes sorts syms by address and sets each Size to the distance to
// the next higher address: of any symbol of the image for the image's
// symbols, of the same module's for a module's (Module set), as the
// kernel's module lookup (find_kallsyms_symbol) sees only its module.
func SortSizes(syms []KSym) {
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].Addr < syms[j].Addr })
	var next uint64 // the nearest higher address, 0 for none
	// Per module: the lowest address seen so far (iterating down) and
	// the nearest address above it.
	type bound struct{ low, above uint64 }
	var mods map[string]*bound
	for i := len(syms) - 1; i >= 0; i-- {
		a := syms[i].Addr
		if i+1 < len(syms) && syms[i+1].Addr > a {
			next = syms[i+1].Addr
		}
		n := next
		if m := syms[i].Module; m != "" {
			if mods == nil {
				mods = map[string]*bound{}
			}
			b := mods[m]
			switch {
			case b == nil:
				mods[m], n = &bound{low: a}, 0
			case b.low > a:
				n, b.above, b.low = b.low, b.low, a
			default: // an alias at b.low
				n = b.above
			}
		}
		syms[i].Size = 0
		if n > a {
			syms[i].Size = n - a
		}
	}
}
