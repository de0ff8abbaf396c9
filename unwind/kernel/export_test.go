package kernel

// Test hooks for the external tests, which open the shipped captures
// through internal/kcapture (an import package kernel's own tests
// cannot make: kcapture imports kernel).

// SetMem makes k's walks and code checks read m (e.g. the dump with
// some ranges rewritten) and returns what they read before.
func SetMem(k *Kernel, m Memory) Memory {
	old := k.mem
	k.mem = m
	return old
}

// ThreadSCS is k.threadSCS: task's SCS base and thread_info.scs_sp.
func ThreadSCS(k *Kernel, task uint64) (base, sp uint64, err error) { return k.threadSCS(task) }

// Read64 is k.read64: the 64-bit word at va through k's memory.
func Read64(k *Kernel, va uint64) (uint64, error) { return k.read64(va) }

// SymAddr is the address of the first symbol called name (0 if none).
func SymAddr(k *Kernel, name string) uint64 { return k.sym[name] }

// PerCPUCode is perCPUCode: call_on_irq_stack's start saving x18 in the
// per-CPU variable at v.
var PerCPUCode = perCPUCode
