package snapshot

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// lazyDoc produces a snapshot document of any size without holding it:
// head, then pieces piece(0) ... piece(n-1), then tail. It counts the bytes
// read from it.
type lazyDoc struct {
	head, tail string
	n          int
	piece      func(i int) string
	i          int    // next piece
	cur        string // the rest of the current part
	started    bool
	read       int64
}

func (d *lazyDoc) Read(p []byte) (int, error) {
	if !d.started {
		d.started, d.cur = true, d.head
	}
	n := 0
	for n < len(p) {
		if d.cur == "" {
			switch {
			case d.i < d.n:
				d.cur = d.piece(d.i)
				d.i++
			case d.i == d.n:
				d.cur = d.tail
				d.i++
			default:
				d.read += int64(n)
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			}
		}
		c := copy(p[n:], d.cur)
		n, d.cur = n+c, d.cur[c:]
	}
	d.read += int64(n)
	return n, nil
}

// size is the document's length.
func (d *lazyDoc) size() int64 {
	total := int64(len(d.head) + len(d.tail))
	for i := range d.n {
		total += int64(len(d.piece(i)))
	}
	return total
}

const docHead = `{"version":1,"arch":"arm64","va_bits":48,"tbi":true,` +
	`"regs":{"pc":"0x1000","sp":"0x8000","x29":"0x0","x30":"0x1000"},"symbols":[],"regions":[`

// measure loads d and returns the error, the bytes allocated on the heap
// during the load (runtime.MemStats.TotalAlloc) and the time taken.
func measure(t *testing.T, d *lazyDoc) (error, uint64, time.Duration) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := Load(d)
	el := time.Since(start)
	runtime.ReadMemStats(&after)
	return err, after.TotalAlloc - before.TotalAlloc, el
}

func wantRule(t *testing.T, err error, rule, field string) {
	t.Helper()
	var ce *errs.CorruptError
	if !errors.As(err, &ce) || ce.Rule != rule || !strings.HasPrefix(ce.Detail, field) {
		t.Errorf("error %v, want rule %q on %s", err, rule, field)
	}
}

// TestLoadOversizedRegion: a region of several GB (generated lazily, never
// held) is rejected after reading about the limit's worth of base64 and
// allocating a small multiple of the limit: the limit is enforced while
// the data string is decoded.
func TestLoadOversizedRegion(t *testing.T) {
	for _, tt := range []struct {
		name  string
		limit int
		size  int64 // base64 characters in the data string
	}{
		{"1MiB limit, 64MiB region", 1 << 20, 64 << 20},
		{"64MiB limit, 300MiB region", MaxRegionSize, 300 << 20},
		{"64MiB limit, 4GiB region", MaxRegionSize, 4 << 30},
		{"64MiB limit, region just over", MaxRegionSize, (MaxRegionSize + 8) / 3 * 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if testing.Short() && tt.limit == MaxRegionSize {
				t.Skip("-short: the 64 MiB limit allocates ~200 MiB") // the 1 MiB case checks the same code
			}
			defer func(old int) { maxRegion = old }(maxRegion)
			maxRegion = tt.limit
			chunk := strings.Repeat("A", 1<<20)
			d := &lazyDoc{
				head:  docHead + `{"name":"big","kind":"stack","base":"0x8000","data":"`,
				n:     int(tt.size >> 20),
				piece: func(int) string { return chunk },
				tail:  strings.Repeat("A", int(tt.size%(1<<20))) + `"}]}`,
			}
			err, alloc, el := measure(t, d)
			t.Logf("%s: rejected after reading %.1f MiB of %.1f MiB, %.1f MiB allocated, %v: %v",
				tt.name, float64(d.read)/(1<<20), float64(tt.size)/(1<<20), float64(alloc)/(1<<20), el.Round(time.Millisecond), err)
			wantRule(t, err, RuleTooLarge, "regions[0].data")
			// Reading: the limit's base64 (4/3 of it) plus buffering.
			if max := int64(tt.limit)/3*4 + 1<<20; d.read > max {
				t.Errorf("read %d bytes of about %d, want at most %d", d.read, tt.size, max)
			}
			if max := uint64(3*tt.limit + 4<<20); alloc > max {
				t.Errorf("allocated %d bytes, want at most %d (3 x limit + 4 MiB)", alloc, max)
			}
		})
	}
}

// regionJSON returns region i: n zero bytes (n a multiple of 24) at its
// own address.
func regionJSON(i int, n int) string {
	return fmt.Sprintf(`{"name":"r%d","kind":"other","base":"%#x","data":"%s"},`, i, 0x100000000+uint64(i)<<32,
		strings.Repeat("A", n/3*4))
}

// TestLoadTotalLimit: regions each under the region limit whose sum is
// over the total limit, and more regions than the count limit, are
// rejected while reading, after reading about the limit.
func TestLoadTotalLimit(t *testing.T) {
	defer func(r, tot, n int) { maxRegion, maxTotal, maxRegions = r, tot, n }(maxRegion, maxTotal, maxRegions)
	maxRegion, maxTotal, maxRegions = 1<<20, 8<<20, 64
	const stack = `{"name":"s","kind":"stack","base":"0x8000","data":"AAAAAAAAAAA="},`
	const tail = `{"name":"last","kind":"other","base":"0x10","data":"AAAAAAAAAAA="}]}`
	t.Run("total", func(t *testing.T) {
		// 2000 regions of 1 MiB - 16: 2.6 GB of JSON, over the 8 MiB total.
		// Odd pieces are one shared string: the generator allocates little.
		data := strings.Repeat("A", (1<<20-16)/3*4) + `"},`
		d := &lazyDoc{head: docHead + stack, n: 4000, tail: tail, piece: func(k int) string {
			if k%2 == 1 {
				return data
			}
			return fmt.Sprintf(`{"name":"r%d","kind":"other","base":"%#x","data":"`, k/2, 0x100000000+uint64(k/2)<<32)
		}}
		err, alloc, el := measure(t, d)
		wantRule(t, err, RuleTotalTooLarge, "regions[")
		if max := int64(maxTotal)/3*4 + 2<<20; d.read > max {
			t.Errorf("read %d bytes, want at most %d", d.read, max)
		}
		if max := uint64(3*maxTotal + 4<<20); alloc > max {
			t.Errorf("allocated %d bytes, want at most %d", alloc, max)
		}
		t.Logf("total: rejected after reading %.1f MiB of %.1f MiB, %.1f MiB allocated, %v: %v",
			float64(d.read)/(1<<20), float64(d.size())/(1<<20), float64(alloc)/(1<<20), el.Round(time.Millisecond), err)
	})
	t.Run("count", func(t *testing.T) {
		d := &lazyDoc{head: docHead + stack, n: 1 << 20, tail: tail, piece: func(i int) string { return regionJSON(i, 24) }}
		err, alloc, _ := measure(t, d)
		wantRule(t, err, RuleTooMany, "regions[64]")
		if d.read > 1<<20 {
			t.Errorf("read %d bytes, want at most 1 MiB", d.read)
		}
		if alloc > 4<<20 {
			t.Errorf("allocated %d bytes, want at most 4 MiB", alloc)
		}
	})
	t.Run("symbols", func(t *testing.T) {
		maxSymbols = 100
		defer func() { maxSymbols = MaxSymbols }()
		head := strings.Replace(docHead, `"symbols":[],`, "", 1)
		d := &lazyDoc{head: head + stack + tail[:len(tail)-1] + `,"symbols":[`, n: 1 << 20,
			tail:  `{"name":"x","addr":"0x0","size":0}]}`,
			piece: func(i int) string { return fmt.Sprintf(`{"name":"f%d","addr":"%#x","size":4},`, i, 4*i) }}
		err, _, _ := measure(t, d)
		wantRule(t, err, RuleTooMany, "symbols[100]")
		if d.read > 1<<20 {
			t.Errorf("read %d bytes, want at most 1 MiB", d.read)
		}
	})
}

// TestLoadSyntaxOffset: a syntax error says at which byte offset it is
// (CorruptError.Addr and the detail), counted from 0.
func TestLoadSyntaxOffset(t *testing.T) {
	good := string(encode(t, valid()))
	for _, tt := range []struct {
		in  string
		off int
	}{
		{`{"version": 1,}`, 14},
		{`{"version" 1}`, 11},
		{`{"version": 1`, 13},
		{`{"version": tru}`, 15},
		{"{\"arch\": \"a\x01\"}", 11},
		{`  [1`, 4},
		{``, 0},
		{good + " x", len(good) + 1},
		{good[:100], 100},
	} {
		_, err := Load(strings.NewReader(tt.in))
		var ce *errs.CorruptError
		if !errors.As(err, &ce) || ce.Rule != RuleSyntax {
			t.Errorf("Load(%.40q): %v, want a syntax error", tt.in, err)
			continue
		}
		if ce.Addr != uint64(tt.off) || !strings.Contains(ce.Detail, fmt.Sprintf("byte offset %d", tt.off)) {
			t.Errorf("Load(%.40q): %v, want byte offset %d", tt.in, err, tt.off)
		}
	}
}

// TestLoadSymbolOrder: symbols may come in any order and may overlap; the
// documented rule (testdata/README.md) is that the innermost symbol (the
// latest start, then the smallest) wins and, among equal ones, the first
// listed.
func TestLoadSymbolOrder(t *testing.T) {
	v := valid()
	v["symbols"] = []any{
		map[string]any{"name": "inner", "addr": "0x1010", "size": 16},
		map[string]any{"name": "outer", "addr": "0x1000", "size": 64},
		map[string]any{"name": "alias1", "addr": "0x2000", "size": 8},
		map[string]any{"name": "alias2", "addr": "0x2000", "size": 8},
		map[string]any{"name": "early", "addr": "0x800", "size": 8},
	}
	s, err := Load(strings.NewReader(string(encode(t, v))))
	if err != nil {
		t.Fatal(err)
	}
	for pc, want := range map[uint64]string{0x1008: "outer", 0x1010: "inner", 0x101f: "inner", 0x1020: "outer",
		0x2004: "alias1", 0x800: "early", 0x808: ""} {
		if got := s.Symbols.Func(pc); got != want {
			t.Errorf("Func(%#x) = %q, want %q", pc, got, want)
		}
	}
}
