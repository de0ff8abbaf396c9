package fp

import (
	"errors"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/internal/tracehash"
	"github.com/unwindkit/unwindkit/ptrauth"
)

const (
	fuzzBase = 0x10000
	fuzzSize = 0x2000 // one region holding all stacks and the gaps between them
	fuzzRet  = 0x80000
)

// fuzzWorld builds, from fuzz input, a region with up to four stacks carved
// out of it and gaps between them, a return-stack region, and a Config.
// gapXor is XORed into every word of the region that lies in no stack: a
// walk that reads only inside its stacks cannot tell two worlds that
// differ only in gapXor apart.
func fuzzWorld(t *testing.T, data []byte, startFP, startPC uint64, flags uint16, gapXor uint64) (*Config, uint64) {
	c, total, _ := fuzzWorldMem(t, data, startFP, startPC, flags, gapXor)
	return c, total
}

// fuzzWorldMem is fuzzWorld that also returns the memory the Config's
// Data are views of (the gaps between the stacks included).
func fuzzWorldMem(t *testing.T, data []byte, startFP, startPC uint64, flags uint16, gapXor uint64) (*Config, uint64, *mem.Memory) {
	byteAt := func(i int) byte {
		if len(data) == 0 {
			return 0
		}
		return data[i%len(data)]
	}
	m := &mem.Memory{}
	r, err := mem.NewRegion("big", "stacks", fuzzBase, fuzzSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Add(r); err != nil {
		t.Fatal(err)
	}
	// Stacks: consecutive [gap][stack] pieces, sizes from the input.
	var stacks []Stack
	off := uint64(0)
	total := uint64(0)
	for i := 0; i < 4; i++ {
		gap := uint64(byteAt(i*2)%8) * 64
		size := uint64(byteAt(i*2+1)%32+1) * 64
		if off+gap+size > fuzzSize {
			break
		}
		kind := StackKind(1 + (int(byteAt(8+i)) % 6))
		stacks = append(stacks, Stack{Kind: kind, Low: fuzzBase + off + gap, High: fuzzBase + off + gap + size, Name: kind.String()})
		off += gap + size
		total += size
	}
	inStack := func(a uint64) bool {
		for _, s := range stacks {
			if a >= s.Low && a < s.High {
				return true
			}
		}
		return false
	}
	// Contents: pointers into the region, zeros, meta types, text.
	words := r.Words()
	for i := range words {
		b0, b1 := byteAt(12+2*i), byteAt(13+2*i)
		var v uint64
		switch b0 % 5 {
		case 0, 1:
			v = fuzzBase + (uint64(b0)<<8|uint64(b1))*8%fuzzSize
		case 2:
			v = 0
		case 3:
			v = uint64(b1 % 4)
		case 4:
			v = text + uint64(b1%8)*0x100
		}
		if !inStack(fuzzBase + 8*uint64(i)) {
			v ^= gapXor
		}
		words[i] = v
	}
	c := &Config{Stacks: stacks}
	c.FP = fuzzBase + startFP%(fuzzSize+64) - 32
	if flags&1 != 0 {
		c.FP = startFP
	}
	c.PC = startPC
	c.Start = [...]Origin{OriginUnknown, OriginCaller, OriginTask, OriginRegsPC}[(flags>>1)%4] // the start origins (TestConfigStart has the others)
	if flags&(1<<3) != 0 {
		c.TaskPtRegs = fuzzBase + uint64(byteAt(20))*8*4%fuzzSize
	}
	if flags&(1<<4) != 0 {
		c.Layout = ptrauth.NewLayout(48, false)
	}
	if flags&(1<<11) != 0 {
		c.ABI = ABIFinalRecord
	}
	if flags&(1<<12) != 0 {
		c.PtRegs = PtRegsLayout{Size: 336, X29: 29 * 8, PC: 256, StackFrame: 304} // Debian 6.1 and 6.12
	}
	if flags&(1<<13) != 0 && c.TaskPtRegs != 0 {
		// Make the end reachable: point the start at it.
		c.FP = c.TaskPtRegs + [2]uint64{PtRegsStackFrameOff, 304}[flags>>12&1]
	}
	c.Reliable = flags&(1<<5) != 0
	c.ZeroFPEnds = flags&(1<<6) != 0
	if flags&(1<<7) != 0 {
		c.GraphTrampoline = text + 0x100
	}
	if flags&(1<<8) != 0 {
		c.KretprobeTrampoline = text + 0x200
	}
	if flags&(3<<7) != 0 {
		rr, err := mem.NewRegion("ret", "retstack", fuzzRet, 0x400)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Add(rr); err != nil {
			t.Fatal(err)
		}
		rw := rr.Words()
		for i := range rw {
			b := byteAt(40 + i)
			switch b % 3 {
			case 0:
				rw[i] = text + uint64(b%8)*0x100
			case 1:
				rw[i] = fuzzBase + uint64(b)*8%fuzzSize
			case 2:
				rw[i] = uint64(b)
			}
		}
		rw[0] = uint64(byteAt(30)) % 80 // count, sometimes too big
		rw[32] = uint64(byteAt(31)) % 40
		if flags&(1<<9) != 0 {
			rw[32] = uint64(byteAt(31)) << 56 // absurd count
		}
		c.GraphStack = fuzzRet
		c.KretprobeStack = fuzzRet + 32*8
		if flags&(1<<10) != 0 {
			c.GraphStack = 0
		}
	}
	return withMem(m, c), total, m
}

type fuzzResult struct {
	frames []Frame
	end    End
	err    string
}

func runFuzzWalk(t *testing.T, c *Config, total uint64) fuzzResult {
	var frames []Frame
	end, err := Walk(c, func(f Frame) bool {
		frames = append(frames, f)
		// Termination: every step consumes at least 16 bytes of a stack,
		// plus the first frame and one FINAL/zero-fp end.
		if uint64(len(frames)) > total/16+2 {
			t.Fatalf("%d frames from %d bytes of stack", len(frames), total)
		}
		return true
	})
	if (end == EndError) != (err != nil) || end == EndNone || end == EndStopped {
		t.Fatalf("end %v err %v", end, err)
	}
	if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnreliable) {
		t.Fatalf("error is neither corrupt nor unreliable: %v", err)
	}
	res := fuzzResult{frames: frames, end: end}
	if err != nil {
		res.err = err.Error()
	}
	return res
}

// FuzzWalk: arbitrary stack contents, start fp/pc and stack sets, under
// both ABIs and both pt_regs layouts (flags bits 11 and 12). The walk
// terminates within the bound the rules give, never panics, reports frames
// plus ErrCorrupt/ErrUnreliable on bad input, agrees with Save for every
// skip, and reads nothing outside its stacks (changing every word outside
// them changes nothing; a read past a stack's words would also panic, as
// each stack is read through a slice of exactly its own words).
func FuzzWalk(f *testing.F) {
	f.Add([]byte{}, uint64(0), uint64(0), uint16(0))
	f.Add([]byte("\x03\x10\x01\x20\x00\x08\x02\x04\x01\x02\x03\x04frame records"), uint64(0x1000), uint64(text), uint16(0x18))
	f.Add([]byte("\x00\x3f\x00\x00\x00\x00\x00\x00\x01\x01\x01\x01pt_regs and meta"), uint64(0x700), uint64(text+4), uint16(0x1ff))
	f.Add([]byte("graph and kretprobe \x00\x01\x02\x03\x04\x05"), uint64(0x123456), uint64(text+0x100), uint16(0x7ff))
	f.Add([]byte("\x03\x10\x01\x20\x00\x08\x02\x04\x01\x02\x03\x04final-record ABI"), uint64(0x1000), uint64(text), uint16(0x1818))
	f.Add([]byte("\x00\x3f\x00\x00\x00\x00\x00\x00\x01\x01\x01\x01old ABI, 6.1 layout"), uint64(0x700), uint64(text+4), uint16(0x39ff))
	f.Fuzz(func(t *testing.T, data []byte, startFP, startPC uint64, flags uint16) {
		c1, total := fuzzWorld(t, data, startFP, startPC, flags, 0)
		c2, _ := fuzzWorld(t, data, startFP, startPC, flags, 0xa5a5_5a5a_0ff0_f00f)
		r1 := runFuzzWalk(t, c1, total)
		r2 := runFuzzWalk(t, c2, total)
		if r1.end != r2.end || r1.err != r2.err || len(r1.frames) != len(r2.frames) {
			t.Fatalf("walk read outside its stacks: %v %q %d vs %v %q %d", r1.end, r1.err, len(r1.frames), r2.end, r2.err, len(r2.frames))
		}
		for i := range r1.frames {
			if r1.frames[i] != r2.frames[i] {
				t.Fatalf("frame %d differs with different gaps: %+v vs %+v", i, r1.frames[i], r2.frames[i])
			}
		}
		// The same world as caller bytes walks the same.
		if d := dataConfig(c1); d != nil {
			frames, end, err := walkFrames(c1)
			checkSameWalk(t, c1, d, frames, end, err)
		} else {
			t.Fatal("fuzz world not convertible to caller bytes")
		}
		full := pcs(r1.frames)
		for _, skip := range []int{0, 1, 3} {
			store := make([]uint64, len(full)+1)
			n, end, err := SaveEnd(c1, store, skip)
			want := full[min(skip, len(full)):]
			if !slices.Equal(store[:n], want) {
				t.Fatalf("Save skip %d: %x, want %x", skip, store[:n], want)
			}
			if end != r1.end || (err == nil) != (r1.err == "") {
				t.Fatalf("Save skip %d: end %v err %v, Walk %v %q", skip, end, err, r1.end, r1.err)
			}
			// SaveHashed stores the same and hashes what it stored, for
			// a full store and one that cuts the trace short.
			for _, size := range []int{len(store), len(want) / 2} {
				hs := make([]uint64, size)
				n0, err0 := Save(c1, hs, skip)
				hn, h, herr := SaveHashed(c1, hs, skip, 0x51ed, 0x9e3779b97f4a7c15)
				if hn != n0 || (herr == nil) != (err0 == nil) || !slices.Equal(hs[:hn], store[:min(n, size)]) {
					t.Fatalf("SaveHashed skip %d size %d: %d %v, Save %d %v", skip, size, hn, herr, n0, err0)
				}
				if w := tracehash.Sum(hs[:hn], 0x51ed, 0x9e3779b97f4a7c15); h != w {
					t.Fatalf("SaveHashed skip %d size %d: hash %#x, the stored frames' %#x", skip, size, h, w)
				}
			}
			// An exact fit: in reliable mode never a success.
			if len(want) > 0 {
				n, end, err = SaveEnd(c1, store[:len(want)], skip)
				if !slices.Equal(store[:n], want) || c1.Reliable && (err == nil || end == EndFinal) {
					t.Fatalf("Save skip %d exact fit (reliable %v): %x %v %v, Walk %v %q", skip, c1.Reliable, store[:n], end, err, r1.end, r1.err)
				}
			}
		}
	})
}

// The fuzz world's gap XOR really reaches words next to the stacks.
func TestFuzzWorldGaps(t *testing.T) {
	data := []byte{7, 1, 7, 1, 7, 1, 7, 1, 1, 2, 3, 4, 5}
	c, _, cm := fuzzWorldMem(t, data, 0, 0, 0, 1<<40)
	_, _, dm := fuzzWorldMem(t, data, 0, 0, 0, 0)
	below := c.Stacks[0].Low - 8
	a, _ := cm.Load(below)
	b, _ := dm.Load(below)
	in1, _ := cm.Load(c.Stacks[0].Low)
	in2, _ := dm.Load(c.Stacks[0].Low)
	if a == b || in1 != in2 {
		t.Fatalf("gap words %#x %#x, stack words %#x %#x", a, b, in1, in2)
	}
}

// FuzzMutateChain starts from a valid SDEI-on-IRQ-on-task machine with
// graph and kretprobe recovery and overwrites fuzz-chosen stack words with
// fuzz-chosen values (often other stack addresses or meta types), so the
// walk meets corrupt pt_regs, meta records and trampolines near real ones.
func FuzzMutateChain(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add([]byte{0, 5, 1, 0, 9, 2, 7, 7, 3}, true)
	f.Add([]byte{200, 1, 2, 100, 30, 0, 50, 50, 1, 9, 9, 4}, false)
	f.Fuzz(func(t *testing.T, patch []byte, reliable bool) {
		m, task, irq := irqOnTask(t)
		gfp := irq.fp
		irq.call(graphTramp)
		kfp := irq.fp
		irq.call(krTramp)
		sdei := m.stack(SDEINormal, "sdei", stackTop+0x200000, SDEIStackSize)
		sdei.exceptionFrom(irq, pc(60), 0)
		sdei.call(pc(61))
		c := m.config(sdei, pc(0))
		c.Reliable = reliable
		c.GraphTrampoline, c.KretprobeTrampoline = graphTramp, krTramp
		c.GraphStack, c.GraphStackData = m.retStack("graph", graphAddr, [2]uint64{pc(5), gfp})
		c.KretprobeStack, c.KretprobeStackData = m.retStack("kr", krAddr, [2]uint64{pc(6), kfp})
		// The used part of each stack, as word addresses.
		var used []uint64
		var total uint64
		for _, s := range []*tstack{task, irq, sdei} {
			for a := s.sp; a < s.s.High; a += 8 {
				used = append(used, a)
			}
			total += s.s.High - s.s.Low
		}
		for i := 0; i+2 < len(patch); i += 3 {
			addr := used[(int(patch[i])<<8|int(patch[i+1]))%len(used)]
			var v uint64
			switch sel := patch[i+2]; sel % 6 {
			case 0:
				v = used[int(sel)%len(used)]
			case 1:
				v = uint64(sel / 6 % 4) // meta types
			case 2:
				v = 0
			case 3:
				v = graphTramp
			case 4:
				v = krTramp
			case 5:
				v = used[int(sel)%len(used)] + 4
			}
			m.mem.Store(addr, v)
		}
		res := runFuzzWalk(t, c, total)
		if d := dataConfig(c); d != nil {
			frames, end, err := walkFrames(c)
			checkSameWalk(t, c, d, frames, end, err)
		} else {
			t.Fatal("machine not convertible to caller bytes")
		}
		want := []uint64{pc(0), pc(61), pc(60), pc(6), pc(5), pc(53), pc(52), pc(51), pc(50), pc(3), pc(2), pc(1)}
		if len(patch) < 3 && !reliable && (res.end != EndFinal || !slices.Equal(pcs(res.frames), want)) {
			t.Fatalf("unmutated chain: %v %q %x", res.end, res.err, pcs(res.frames))
		}
		store := make([]uint64, len(res.frames)+1)
		n, end, err := SaveEnd(c, store, 0)
		if !slices.Equal(store[:n], pcs(res.frames)) || end != res.end || (err == nil) != (res.err == "") {
			t.Fatalf("Save %x %v %v, Walk %x %v %q", store[:n], end, err, pcs(res.frames), res.end, res.err)
		}
	})
}
