package snapshot

import (
	"fmt"
	"os"
)

func Example() {
	f, err := os.Open("../../testdata/arm64/snapshots/gcc-pacret-pauth-chain.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	s, err := Load(f)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("pc:", s.Symbols.Func(s.Regs.PC))
	// Walk the frame records {fp, lr} from x29, stripping each PAC.
	for fp := s.Regs.X29; fp != 0; {
		next, ok1 := s.Memory.Load(fp)
		lr, ok2 := s.Memory.Load(fp + 8)
		if !ok1 || !ok2 {
			break
		}
		fmt.Println("lr:", s.Symbols.Func(s.Layout.Strip(lr)))
		fp = next
	}
	// Output:
	// pc: capture
	// lr: shape_args
	// lr: shape_vla
	// lr: shape_callee
	// lr: shape_big
	// lr: chain_root
	// lr: main
	// lr: _start
}
