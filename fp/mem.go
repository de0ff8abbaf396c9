package fp

import "github.com/unwindkit/unwindkit/internal/mem"

// Two kinds of memory back a walk. A caller's memory is plain read-only
// bytes attached to each descriptor (Stack.Data, Config.GraphStackData,
// Config.KretprobeStackData): nothing to implement, no interface call per
// word, and the hot loop reads it with bounds-checked little-endian loads.
// The machine model's memory is written by modelled CPUs while other
// goroutines unwind them, so it is read word by word with sync/atomic; the
// model attaches it to a Config through mem.AttachFP, which only code
// inside this module can reach, so no exported identifier of this package
// mentions an internal type.
func init() {
	mem.AttachFP = attach
}

// attach sets the model memory of the *Config cfg (see mem.AttachFP).
func attach(cfg any, m *mem.Memory) {
	cfg.(*Config).mem = m
}
