package ptrauth

import "sync"

// This file is the fast ComputePAC for QARMA5 and QARMA3. It computes the
// same function as QARMA64 (qarma.go) with byte-sliced lookup tables in the
// manner of AES "T-tables": every layer between two tweakey additions is
// an S-box layer (cell-wise) followed by a linear layer, so it splits into
// eight tables indexed by one byte of the state, whose entries are XOR-ed.
//
// Write L = M∘τ (the forward linear layer), S the S-box layer and T_i the
// i-th tweak (T_0 = modifier, T_{i+1} = ω(h(T_i))), c_i = k1 ⊕ RC_i. The
// forward rounds x_i = S(L(x_{i-1} ⊕ T_i ⊕ c_i)) are rewritten with
// u_i = L(x_{i-1} ⊕ T_i ⊕ c_i) as
//
//	u_i = (L∘S)(u_{i-1}) ⊕ L(T_i ⊕ c_i)
//
// so each forward round costs one L∘S table pass on the state and one L
// table pass on the tweakey. The backward rounds need no such trick:
// z ← (τ⁻¹∘M∘S⁻¹)(z) ⊕ T_j ⊕ c_j ⊕ α. The centre (S, pseudo-reflector,
// backward centre round) is one L∘S pass, ⊕k1 and one τ⁻¹∘M∘τ⁻¹∘S⁻¹ pass.
// All tables are filled from the reference layers in qarma.go on first use.

// byteTable is a map on 64-bit states that splits by byte: f(x) is the XOR
// of t[j][byte j of x].
type byteTable [8][256]uint64

// The XORs are grouped as a balanced tree: the compiler does not
// reassociate, and the round function is latency-bound.
func (t *byteTable) apply(x uint64) uint64 {
	return ((t[0][uint8(x)] ^ t[1][uint8(x>>8)]) ^ (t[2][uint8(x>>16)] ^ t[3][uint8(x>>24)])) ^
		((t[4][uint8(x>>32)] ^ t[5][uint8(x>>40)]) ^ (t[6][uint8(x>>48)] ^ t[7][uint8(x>>56)]))
}

// fill sets t[j][v] = lin(sub(v) << 8j), where sub maps the byte's two
// cells through sb (or leaves them if sb is nil) and lin is GF(2)-linear.
// Then t.apply(x) = lin(S(x)).
func (t *byteTable) fill(sb *[16]uint8, lin func(uint64) uint64) {
	for j := range 8 {
		for v := range 256 {
			s := uint64(v)
			if sb != nil {
				s = uint64(sb[v>>4])<<4 | uint64(sb[v&0xf])
			}
			t[j][v] = lin(s << (8 * j))
		}
	}
}

// linTables are the tables that do not depend on the S-box.
type linTables struct {
	l     byteTable // L = M∘τ
	tweak byteTable // T ↦ ω(h(T))
}

// sboxTables are the tables of one ComputePAC variant.
type sboxTables struct {
	ls   byteTable // L∘S
	lsi  byteTable // τ⁻¹∘M∘S⁻¹
	mid  byteTable // τ⁻¹∘M∘τ⁻¹∘S⁻¹
	sinv [256]uint8
}

var (
	linOnce sync.Once
	lin     *linTables

	sbOnce [3]sync.Once
	sbTab  [3]*sboxTables
)

func linearTables() *linTables {
	linOnce.Do(func() {
		t := new(linTables)
		t.l.fill(nil, forwardLinear)
		t.tweak.fill(nil, tweakForward)
		lin = t
	})
	return lin
}

func forwardLinear(x uint64) uint64 { return mixColumns(permute(x, &cellTau)) }

func backwardLinear(x uint64) uint64 { return invPermute(mixColumns(x), &cellTau) }

func tablesFor(sbox int) *sboxTables {
	sbOnce[sbox].Do(func() {
		sb, isb := &sboxes[sbox], &invSboxes[sbox]
		t := new(sboxTables)
		t.ls.fill(sb, forwardLinear)
		t.lsi.fill(isb, backwardLinear)
		t.mid.fill(isb, func(x uint64) uint64 { return backwardLinear(invPermute(x, &cellTau)) })
		for v := range 256 {
			t.sinv[v] = isb[v>>4]<<4 | isb[v&0xf]
		}
		sbTab[sbox] = t
	})
	return sbTab[sbox]
}

func (t *sboxTables) invSub(x uint64) uint64 {
	var o uint64
	for j := range 8 {
		o |= uint64(t.sinv[uint8(x>>(8*j))]) << (8 * j)
	}
	return o
}

// qarma5 is ComputePAC with FEAT_PACQARMA5: QARMA-64, σ2, 5 rounds.
func qarma5(data, modifier, hi, lo uint64) uint64 {
	return qarmaFast(data, modifier, hi, lo, linearTables(), tablesFor(2), 5)
}

// qarma3 is ComputePAC with FEAT_PACQARMA3: QARMA-64, σ1, 3 rounds.
func qarma3(data, modifier, hi, lo uint64) uint64 {
	return qarmaFast(data, modifier, hi, lo, linearTables(), tablesFor(1), 3)
}

// qarmaFast computes QARMA64(p, t0, w0, k1, σ, r) for r ≤ 5 with tables.
func qarmaFast(p, t0, w0, k1 uint64, lt *linTables, st *sboxTables, r int) uint64 {
	w1 := orthomorphism(w0)
	var tw [6]uint64      // T_0..T_r
	r = min(r, len(tw)-1) // callers pass 3 or 5; this lets the compiler drop bounds checks
	tw[0] = t0
	// Round 0 is short: S only. u_1 = L(S(p⊕w0⊕k1⊕T_0)) ⊕ L(T_1⊕c_1).
	u := st.ls.apply(p ^ w0 ^ k1 ^ t0)
	tw[1] = lt.tweak.apply(t0)
	u ^= lt.l.apply(tw[1] ^ k1 ^ roundConst[1])
	for i := 2; i < r; i++ {
		tw[i] = lt.tweak.apply(tw[i-1])
		u = st.ls.apply(u) ^ lt.l.apply(tw[i]^k1^roundConst[i])
	}
	// Centre: forward round with w1⊕T_r, pseudo-reflector, backward round
	// with w0⊕T_r.
	tr := lt.tweak.apply(tw[r-1])
	u = st.ls.apply(u) ^ lt.l.apply(tr^w1)
	z := st.mid.apply(st.ls.apply(u)^k1) ^ w0 ^ tr
	for j := r - 1; j >= 1; j-- {
		z = st.lsi.apply(z) ^ tw[j] ^ k1 ^ roundConst[j] ^ alpha
	}
	// Round 0 backward is short: S⁻¹ only; then the w1 whitening.
	return st.invSub(z) ^ t0 ^ k1 ^ alpha ^ w1
}
