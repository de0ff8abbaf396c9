package scs

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// refSave is a reference copy unwinder written from the rules, slot by
// slot through a bounds-checked little-endian read of the segment's memory
// (Data, or the model's words): all frames (no store, no skip) and the
// error that ended the walk.
func refSave(v *View) ([]uint64, error) {
	if v.Disabled {
		return nil, ErrNotSupported
	}
	if v.N < 1 || v.N > NumContexts {
		return nil, &CorruptError{Rule: "bad scs view", Addr: uint64(v.N)}
	}
	var out []uint64
	for i := 0; i < v.N; i++ {
		s := v.Segs[i]
		if s.Hidden {
			return out, ErrInterruptedTopHidden
		}
		var mem []byte
		switch {
		case s.words != nil:
			mem = make([]byte, 8*len(s.words))
			for k, w := range s.words {
				binary.LittleEndian.PutUint64(mem[8*k:], w)
			}
		case s.Data != nil:
			mem = s.Data[:len(s.Data)&^7]
		default:
			return out, &CorruptError{Rule: "scs region missing", Addr: s.Top}
		}
		load := func(a uint64) uint64 { // a is an address
			if a < s.Base || a-s.Base+8 > uint64(len(mem)) {
				panic("reference read outside the memory")
			}
			return binary.LittleEndian.Uint64(mem[a-s.Base:])
		}
		if s.Base%8 != 0 {
			return out, &CorruptError{Rule: "misaligned scs base", Addr: s.Base}
		}
		end := s.Base + uint64(len(mem))
		if s.Size != 0 {
			if s.Size%8 != 0 || s.Size > uint64(len(mem)) {
				return out, &CorruptError{Rule: "scs outside region", Addr: s.Base}
			}
			end = s.Base + s.Size
		}
		if s.Magic {
			if end-s.Base < 8 {
				return out, &CorruptError{Rule: "scs too small for end magic", Addr: s.Base}
			}
			end -= 8
			if load(end) != EndMagic {
				return out, &CorruptError{Rule: "scs end magic overwritten", Addr: end}
			}
		}
		switch {
		case s.Top%8 != 0:
			return out, &CorruptError{Rule: "misaligned scs pointer", Addr: s.Top}
		case s.Top < s.Base:
			return out, &CorruptError{Rule: "scs pointer below base", Addr: s.Top}
		case s.Top > end:
			return out, &CorruptError{Rule: "scs pointer outside region", Addr: s.Top}
		}
		for a := s.Top; a > s.Base; a -= 8 {
			out = append(out, v.Layout.Strip(load(a-8)))
		}
		if v.StopAtBoundary || i+1 == v.N {
			break
		}
		if s.HasInterruptedPC {
			out = append(out, s.InterruptedPC)
		}
	}
	return out, nil
}

// checkAgainstRef runs Save and Frames and compares them with refSave.
func checkAgainstRef(t *testing.T, v *View, skip, size int) {
	t.Helper()
	all, refErr := refSave(v)
	wantN, wantErr := 0, error(nil)
	if size > 0 || v.Disabled {
		avail := len(all) - max(skip, 0)
		if avail >= size && !v.Disabled {
			wantN = size
		} else {
			wantN, wantErr = max(avail, 0), refErr
		}
	}
	if v.Disabled {
		wantN = 0
	}
	store := make([]uint64, size)
	n, err := Save(v, store, skip)
	if n != wantN {
		t.Fatalf("Save stored %d, reference %d (err %v, ref %v)", n, wantN, err, refErr)
	}
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("Save err %v, reference %v", err, wantErr)
	}
	var ce, rce *CorruptError
	switch {
	case errors.As(wantErr, &rce):
		if !errors.As(err, &ce) || ce.Rule != rce.Rule || ce.Addr != rce.Addr {
			t.Fatalf("Save err %v, reference %v", err, wantErr)
		}
	case wantErr != nil && !errors.Is(err, wantErr):
		t.Fatalf("Save err %v, reference %v", err, wantErr)
	}
	for i := range n {
		if store[i] != all[max(skip, 0)+i] {
			t.Fatalf("entry %d: %#x, reference %#x", i, store[i], all[max(skip, 0)+i])
		}
	}
	checkFrames(t, v, skip, size)
}

// fuzzView builds a View from fuzz input: two regions filled from data and
// up to four segments described by ctl.
func fuzzView(data, ctl []byte) View {
	half := len(data) / 2
	ra, _ := mem.NewRegionBytes("a", "scs", 0x1000, data[:half])
	rb, _ := mem.NewRegionBytes("b", "scs", 0x8000, data[half:])
	word := func() uint64 {
		var b [8]byte
		k := copy(b[:], ctl)
		ctl = ctl[k:]
		return binary.LittleEndian.Uint64(b[:])
	}
	var v View
	hdr := word()
	v.N = int(hdr&7) - 1
	v.StopAtBoundary = hdr&0x100 != 0
	v.Disabled = hdr&0x200 != 0 && hdr&0x400 != 0
	switch hdr >> 11 & 3 {
	case 1:
		v.Layout = ptrauth.NewLayout(39, false)
	case 2:
		v.Layout = ptrauth.NewLayout(48, true)
	case 3:
		v.Layout = ptrauth.NewLayout(52, false)
	}
	for i := range v.Segs {
		fl := word()
		s := &v.Segs[i]
		s.Context = Context(fl & 3)
		var r *mem.Region
		switch fl >> 2 & 3 {
		case 0, 1:
			r = [2]*mem.Region{ra, rb}[fl>>2&1]
		case 3:
			r, _ = mem.NewRegion("c", "scs", 0xffffffffffffe000, 0x1000)
		}
		s.Magic = fl&0x10 != 0
		s.Hidden = fl&0x20 != 0 && fl&0x40 != 0
		s.HasInterruptedPC = fl&0x80 != 0
		s.InterruptedPC = fl >> 32
		rel := func(x uint64) uint64 {
			if x&1 != 0 || r == nil { // absolute
				return x
			}
			a := r.Base + (x>>2)%0x80*8
			if x&2 != 0 {
				a += x >> 10 & 7
			}
			return a
		}
		s.Base = rel(word())
		s.Top = rel(word())
		// The segment's memory from Base: caller bytes, or (flag 0x200,
		// Base aligned) the model's kind, words.
		if r != nil && s.Base >= r.Base && s.Base <= r.End() {
			if fl&0x200 != 0 && s.Base%8 == 0 {
				s.words = r.Words()[(s.Base-r.Base)/8:]
			} else {
				s.Data = regionBytes(r, s.Base)
			}
		}
		if fl&0x100 != 0 {
			s.Size = (fl >> 9 & 0xff) * 8
		}
	}
	return v
}

// fuzzSeed is a valid two-segment view: an IRQ segment of 5 entries in
// region a (end magic in its last word) with an interrupted PC, then a task
// segment of 24 entries in region b, 39-bit PAC layout.
func fuzzSeed() (data, ctl []byte) {
	// A valid two-segment view with magic: region a holds entries and the
	// magic at its last word.
	data = make([]byte, 2*256)
	for i := 0; i < 256; i += 8 {
		binary.LittleEndian.PutUint64(data[i:], 0xffff800000001000+uint64(i))
		binary.LittleEndian.PutUint64(data[256+i:], 0x0000aaaa00002000+uint64(i))
	}
	binary.LittleEndian.PutUint64(data[248:], EndMagic)
	ctl = make([]byte, 8*13)
	binary.LittleEndian.PutUint64(ctl[0:], 3|1<<11)
	binary.LittleEndian.PutUint64(ctl[8:], 0x10|0x80|1|0x8000dead<<32) // irq, region a, magic, pc
	binary.LittleEndian.PutUint64(ctl[16:], 0)                         // base a+0
	binary.LittleEndian.PutUint64(ctl[24:], 5<<2)                      // top a+40
	binary.LittleEndian.PutUint64(ctl[32:], 1<<2)                      // task, region b
	binary.LittleEndian.PutUint64(ctl[40:], 1<<2)
	binary.LittleEndian.PutUint64(ctl[48:], 25<<2)
	return data, ctl
}

func FuzzSave(f *testing.F) {
	data, ctl := fuzzSeed()
	f.Add(data, ctl, 0, uint8(64))
	f.Add(data, ctl, 3, uint8(5))
	f.Add(data, []byte{1}, 0, uint8(8))
	f.Add([]byte{}, []byte{5, 0, 0, 0, 0, 0, 0, 0, 0x30}, -2, uint8(3))
	f.Fuzz(func(t *testing.T, data, ctl []byte, skip int, size uint8) {
		if len(data) > 1<<16 {
			return
		}
		v := fuzzView(data, ctl)
		for i := range v.Segs {
			s := &v.Segs[i]
			cnt, bad := s.check()
			if err := s.err(); (bad == segOK) != (err == nil) || bad == segOK && cnt < 0 {
				t.Fatalf("segment %d: check %d rule %d, err %v", i, cnt, bad, err)
			}
		}
		checkAgainstRef(t, &v, skip, int(size))
	})
}

// FuzzModel drives a model with a random operation sequence and checks,
// after every operation, that the model accepted exactly the operations a
// shadow bookkeeping allows and that Save returns the shadow's trace.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 2, 0, 0, 3, 0, 4, 0, 5, 0, 6, 6, 3})
	f.Add([]byte{0x12, 0, 0, 2, 0, 4, 0, 5, 0, 1, 6, 1, 6, 1, 3, 7, 0, 0})
	f.Add([]byte{0x21, 2, 0, 0, 4, 5, 0, 7, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 || len(ops) > 4096 {
			return
		}
		p := Policy(ops[0] % 3)
		keep := ops[0]&0x10 != 0
		const size = 128 // 15 entries per stack
		r := newRig(t, Config{Policy: p, KeepInterruptedPC: keep, Size: size})
		m := r.m
		tasks := []*Task{m.Current(0)}
		taskStacks := map[*Task][]uint64{tasks[0]: nil}
		cur := 0
		var nest []Context // entered contexts above the task
		ctxStacks := map[Context][]uint64{}
		var pcs []uint64
		counter := uint64(0)
		top := func() Context {
			if len(nest) == 0 {
				return CtxTask
			}
			return nest[len(nest)-1]
		}
		stack := func() []uint64 {
			if c := top(); c != CtxTask {
				return ctxStacks[c]
			}
			return taskStacks[tasks[cur]]
		}
		setStack := func(s []uint64) {
			if c := top(); c != CtxTask {
				ctxStacks[c] = s
			} else {
				taskStacks[tasks[cur]] = s
			}
		}
		for _, op := range ops[1:] {
			counter++
			switch op % 8 {
			case 0, 1: // push
				val := 0xffff800000000000 | counter<<4 | uint64(op)
				err := m.Push(0, val)
				if s := stack(); len(s) < size/8-1 {
					if err != nil {
						t.Fatalf("push: %v", err)
					}
					setStack(append(s, val))
				} else if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("push on full stack: %v", err)
				}
			case 2: // pop
				v, err := m.Pop(0)
				if s := stack(); len(s) > 0 {
					if err != nil || v != s[len(s)-1] {
						t.Fatalf("pop: %#x %v, want %#x", v, err, s[len(s)-1])
					}
					setStack(s[:len(s)-1])
				} else if err == nil {
					t.Fatal("pop on empty stack succeeded")
				}
			case 3, 4, 5: // enter IRQ, SDEI normal, SDEI critical
				c := Context(op%8 - 2)
				pc := 0xffff800090000000 | counter
				err := r.enter(0, c, pc)
				if top() < c && (c != CtxIRQ || top() == CtxTask) {
					if err != nil {
						t.Fatalf("enter %s: %v", c, err)
					}
					nest = append(nest, c)
					ctxStacks[c] = nil
					pcs = append(pcs, pc)
				} else if !errors.Is(err, ErrNesting) {
					t.Fatalf("enter %s from %s: %v", c, top(), err)
				}
			case 6: // exit innermost
				c := top()
				var err error
				if c == CtxTask || c == CtxIRQ {
					err = r.exitIRQ(0)
				} else {
					err = m.ExitSDEI(0)
				}
				if c == CtxTask {
					if err == nil {
						t.Fatal("exit from task context succeeded")
					}
					break
				}
				if err != nil {
					t.Fatalf("exit %s: %v", c, err)
				}
				nest = nest[:len(nest)-1]
				pcs = pcs[:len(pcs)-1]
			case 7: // switch task (create one in a third of the cases)
				if op&0x80 != 0 || len(tasks) == 1 {
					tk, err := m.NewTask("t")
					if err != nil {
						t.Fatal(err)
					}
					tasks = append(tasks, tk)
				}
				next := int(op>>3) % len(tasks)
				err := m.Switch(0, tasks[next])
				if top() == CtxTask {
					if err != nil {
						t.Fatalf("switch: %v", err)
					}
					cur = next
				} else if !errors.Is(err, ErrNesting) {
					t.Fatalf("switch in %s: %v", top(), err)
				}
			}
			// Ground truth from the shadow bookkeeping.
			var want []uint64
			var wantErr error
			for k := len(nest); k >= 0; k-- {
				var s []uint64
				if k == 0 {
					s = taskStacks[tasks[cur]]
				} else {
					s = ctxStacks[nest[k-1]]
				}
				for i := len(s) - 1; i >= 0; i-- {
					want = append(want, s[i])
				}
				if k == 0 {
					break
				}
				if keep {
					want = append(want, pcs[k-1])
				}
				if p == OnStack && nest[k-1] == CtxIRQ { // x18 on the task stack; SDEI's is in its saved registers
					wantErr = ErrInterruptedTopHidden
					break
				}
			}
			got, err := saveAll(m, 0)
			if !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
				t.Fatalf("Save err %v, want %v", err, wantErr)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("Save %x\nwant %x", got, want)
			}
			v, _ := m.View(0)
			checkAgainstRef(t, &v, int(counter%5), int(counter%7)+len(want)/2)
		}
	})
}

func TestFuzzSeedValid(t *testing.T) {
	v := fuzzView(fuzzSeed())
	buf := make([]uint64, 64)
	n, err := Save(&v, buf, 0)
	if err != nil || n != 5+1+24 || buf[5] != 0x8000dead || buf[0] != 0xffffff8000001020 || buf[6] != 0x2a000020c0 {
		t.Fatalf("seed view: %d %v %x", n, err, buf[:n])
	}
}
