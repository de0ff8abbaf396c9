package snapshot

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/mem"
)

// file is what Load reads, before the checks of build. Nil pointers are
// fields the document does not have (or has as null).
type file struct {
	Version    *int
	Arch       *string
	VABits     *int
	TBI        *bool
	Regs       *fileRegs
	SCSBase    *string
	HasRegions bool
	Regions    []*mem.Region // built as each region is read
	Symbols    *[]fileSymbol
	Expect     []string
}

type fileRegs struct {
	PC, SP, X18, X29, X30, GCSPR *string
}

type fileRegion struct {
	Name, Kind, Base *string
	HasData          bool
	Data             []byte // decoded; valid until the next region is read
}

type fileSymbol struct {
	Name, Addr   *string
	Size         *string // a number's text, or a string
	SizeIsString bool
}

// Load reads one snapshot (format version 1) from r and checks it.
//
// It reads the document a token at a time and enforces [MaxRegionSize],
// [MaxTotalSize], [MaxRegions], [MaxSymbols] and [MaxString] while it
// reads: a region's base64 is decoded 4 KiB at a time and the load fails
// as soon as the region or the total passes its limit, so a rejected
// document costs at most about twice the limit in memory and reads about
// the limit's worth of input, whatever its size. Syntax errors give the
// byte offset; other errors name the field. Unknown fields are skipped
// without being kept. Duplicate keys: the last one wins, as in
// encoding/json, except that every region and symbol of every "regions"
// and "symbols" array counts toward the limits.
func Load(r io.Reader) (*Snapshot, error) {
	l := &loader{j: jreader{r: bufio.NewReaderSize(r, 64<<10)}}
	c, off, err := l.j.ws()
	if err != nil {
		return nil, err
	}
	if c != '{' {
		return nil, l.wrong("(document)", c, off, "an object")
	}
	var f file
	if err := l.j.object(func(key string, _ int64) error { return l.top(&f, key) }); err != nil {
		return nil, err
	}
	if err := l.j.end(); err != nil {
		return nil, err
	}
	return build(&f)
}

// loader walks the snapshot's shape over a jreader, counting what it keeps.
type loader struct {
	j       jreader
	kept    int64  // decoded region bytes and kept strings so far
	scratch []byte // region data, reused from region to region
	regions int    // regions read, over all "regions" arrays
	symbols int
}

// keep counts n more bytes kept, failing past the total limit.
func (l *loader) keep(field string, n int, off int64) error {
	if l.kept+int64(n) > int64(maxTotal) {
		return errs.Corruptf(RuleTotalTooLarge, uint64(off), "%s: the snapshot keeps more than %d bytes (byte offset %d)",
			field, maxTotal, off)
	}
	l.kept += int64(n)
	return nil
}

// str reads a string value (null: absent) and counts it as kept.
func (l *loader) str(field string) (*string, error) {
	c, off, err := l.j.ws()
	if err != nil {
		return nil, err
	}
	switch c {
	case 'n':
		return nil, l.j.literal(c)
	case '"':
		s, err := l.j.str(field, MaxString, nil)
		if err != nil {
			return nil, err
		}
		return &s, l.keep(field, len(s), off)
	}
	return nil, l.wrong(field, c, off, "a string")
}

// int reads an integer value (null: absent).
func (l *loader) int(field string) (*int, error) {
	c, off, err := l.j.ws()
	if err != nil {
		return nil, err
	}
	switch {
	case c == 'n':
		return nil, l.j.literal(c)
	case c == '-' || c >= '0' && c <= '9':
		text, err := l.j.number(c, off)
		if err != nil {
			return nil, err
		}
		v, err := strconv.Atoi(text)
		if err != nil {
			return nil, errs.Corruptf(RuleBadValue, uint64(off), "%s: %s is not an int (byte offset %d)", field, clip(text), off)
		}
		return &v, nil
	}
	return nil, l.wrong(field, c, off, "an int")
}

func (l *loader) bool(field string) (*bool, error) {
	c, off, err := l.j.ws()
	if err != nil {
		return nil, err
	}
	switch c {
	case 'n':
		return nil, l.j.literal(c)
	case 't', 'f':
		v := c == 't'
		return &v, l.j.literal(c)
	}
	return nil, l.wrong(field, c, off, "a boolean")
}

// open reads the opening byte of an object or array value (want '{' or
// '['); ok is false for null.
func (l *loader) open(field string, want byte) (ok bool, err error) {
	c, off, err := l.j.ws()
	if err != nil {
		return false, err
	}
	switch c {
	case want:
		return true, nil
	case 'n':
		return false, l.j.literal(c)
	}
	return false, l.wrong(field, c, off, map[byte]string{'{': "an object", '[': "an array"}[want])
}

// element opens the object of element i (field) of an array that may
// hold limit elements, named what in the error: the limit is checked
// before anything of the element is read, and null is an error.
func (l *loader) element(field string, i, limit int, what string) error {
	if i >= limit {
		return errs.Corruptf(RuleTooMany, uint64(l.j.off), "%s: more than %d %s (byte offset %d)", field, limit, what, l.j.off)
	}
	ok, err := l.open(field, '{')
	if err != nil {
		return err
	}
	if !ok {
		return fieldErr(RuleBadValue, 0, field, "null where an object is wanted")
	}
	return nil
}

// wrong reads the value starting with c, of the wrong type for field:
// a syntax error in it comes first, then the type error.
func (l *loader) wrong(field string, c byte, off int64, want string) error {
	if err := l.j.skip(c, off, 0); err != nil {
		return err
	}
	return typeErr(field, c, off, want)
}

// skip reads and drops the value of an unknown field.
func (l *loader) skip() error {
	c, off, err := l.j.ws()
	if err != nil {
		return err
	}
	return l.j.skip(c, off, 0)
}

func (l *loader) top(f *file, key string) error {
	var err error
	switch key {
	case "version":
		f.Version, err = l.int("version")
	case "arch":
		f.Arch, err = l.str("arch")
	case "va_bits":
		f.VABits, err = l.int("va_bits")
	case "tbi":
		f.TBI, err = l.bool("tbi")
	case "scs_base":
		f.SCSBase, err = l.str("scs_base")
	case "regs":
		var ok bool
		if ok, err = l.open("regs", '{'); ok {
			f.Regs = &fileRegs{}
			err = l.j.object(func(key string, _ int64) error { return l.regs(f.Regs, key) })
		}
	case "regions":
		var ok bool
		if ok, err = l.open("regions", '['); ok {
			f.HasRegions, f.Regions = true, f.Regions[:0]
			err = l.j.array(func(int) error {
				i := l.regions
				l.regions++
				r, err := l.region(i)
				if err == nil {
					f.Regions = append(f.Regions, r)
				}
				return err
			})
		}
	case "symbols":
		var ok bool
		if ok, err = l.open("symbols", '['); ok {
			syms := []fileSymbol{}
			f.Symbols = &syms
			err = l.j.array(func(int) error {
				i := l.symbols
				l.symbols++
				s, err := l.symbol(i)
				syms = append(syms, s)
				f.Symbols = &syms
				return err
			})
		}
	case "expect":
		var ok bool
		if ok, err = l.open("expect", '['); ok {
			f.Expect = []string{}
			err = l.j.array(func(i int) error {
				field := fmt.Sprintf("expect[%d]", i)
				if i >= maxSymbols {
					return errs.Corruptf(RuleTooMany, uint64(l.j.off), "%s: more than %d entries", field, maxSymbols)
				}
				s, err := l.str(field)
				if err == nil && s == nil {
					err = typeErr(field, 'n', l.j.off-4, "a string")
				}
				if err == nil {
					f.Expect = append(f.Expect, *s)
				}
				return err
			})
		}
	default:
		err = l.skip()
	}
	return err
}

func (l *loader) regs(r *fileRegs, key string) error {
	dst := map[string]**string{"pc": &r.PC, "sp": &r.SP, "x18": &r.X18, "x29": &r.X29, "x30": &r.X30, "gcspr": &r.GCSPR}[key]
	if dst == nil {
		return l.skip()
	}
	v, err := l.str("regs." + key)
	*dst = v
	return err
}

// region reads regions[i], streaming its data under the limits, and
// builds it.
func (l *loader) region(i int) (*mem.Region, error) {
	field := fmt.Sprintf("regions[%d]", i)
	if err := l.element(field, i, maxRegions, "regions"); err != nil {
		return nil, err
	}
	var fr fileRegion
	err := l.j.object(func(key string, _ int64) error {
		var err error
		switch key {
		case "name":
			fr.Name, err = l.str(field + ".name")
		case "kind":
			fr.Kind, err = l.str(field + ".kind")
		case "base":
			fr.Base, err = l.str(field + ".base")
		case "data":
			fr.HasData, fr.Data, err = l.data(field + ".data")
		default:
			err = l.skip()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	r, err := newRegion(i, &fr)
	if err != nil {
		return nil, err
	}
	return r, l.keep(field+".data", len(fr.Data), l.j.off)
}

// data decodes a region's base64 into the scratch buffer, failing as soon
// as the region passes maxRegion or the snapshot maxTotal.
func (l *loader) data(field string) (bool, []byte, error) {
	c, off, err := l.j.ws()
	if err != nil {
		return false, nil, err
	}
	switch c {
	case 'n':
		return false, nil, l.j.literal(c)
	case '"':
	default:
		return false, nil, l.wrong(field, c, off, "a base64 string")
	}
	limit := min(int64(maxRegion), int64(maxTotal)-l.kept)
	l.scratch, err = l.j.base64(field, l.scratch[:0], int(max(limit, 0)), func(n int, at int64) error {
		if limit < int64(maxRegion) {
			return errs.Corruptf(RuleTotalTooLarge, uint64(at), "%s: the snapshot keeps more than %d bytes (byte offset %d)",
				field, maxTotal, at)
		}
		return errs.Corruptf(RuleTooLarge, uint64(at), "%s: more than %d bytes (%d decoded by byte offset %d)",
			field, maxRegion, n, at)
	})
	return true, l.scratch, err
}

func (l *loader) symbol(i int) (fileSymbol, error) {
	field := fmt.Sprintf("symbols[%d]", i)
	var s fileSymbol
	if err := l.element(field, i, maxSymbols, "symbols"); err != nil {
		return s, err
	}
	// Each symbol keeps a Symbol (40 bytes) besides its name.
	if err := l.keep(field, 40, l.j.off); err != nil {
		return s, err
	}
	err := l.j.object(func(key string, _ int64) error {
		var err error
		switch key {
		case "name":
			s.Name, err = l.str(field + ".name")
		case "addr":
			s.Addr, err = l.str(field + ".addr")
		case "size":
			s.Size, s.SizeIsString, err = l.size(field + ".size")
		default:
			err = l.skip()
		}
		return err
	})
	return s, err
}

// size reads a symbol size: a number (its text) or a string.
func (l *loader) size(field string) (*string, bool, error) {
	c, off, err := l.j.ws()
	if err != nil {
		return nil, false, err
	}
	switch {
	case c == 'n':
		return nil, false, l.j.literal(c)
	case c == '"':
		s, err := l.j.str(field, 64, nil)
		return &s, true, err
	case c == '-' || c >= '0' && c <= '9':
		s, err := l.j.number(c, off)
		return &s, false, err
	}
	return nil, false, l.wrong(field, c, off, "a number or hex string")
}
