package vmcore_test

import (
	"fmt"
	"strings"

	"github.com/unwindkit/unwindkit/unwind/vmcore"
)

// Symbols from /proc/kallsyms text get their sizes from the next address,
// as the kernel's own kallsyms_lookup_size_offset computes them.
func ExampleParseKallsyms() {
	text := `ffff800080010000 T _stext
ffff800080010000 t gic_handle_irq
ffff800080010130 t gic_handle_irq_nmi
ffff800080010200 T show_regs
`
	syms, err := vmcore.ParseKallsyms(strings.NewReader(text))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range syms {
		fmt.Printf("%c %-20s %#x size %#x\n", s.Type, s.Name, s.Addr, s.Size)
	}
	// Output:
	// T _stext               0xffff800080010000 size 0x130
	// t gic_handle_irq       0xffff800080010000 size 0x130
	// t gic_handle_irq_nmi   0xffff800080010130 size 0xd0
	// T show_regs            0xffff800080010200 size 0x0
}
