package slab_test

import (
	"fmt"
	"strings"

	"github.com/unwindkit/unwindkit/examples/kasan/slab"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

// The scripted run's three bugs, recorded with the shadow call stack copy
// under the seed patch's per-CPU policy, with PAC.
func ExampleSim_Demo() {
	s, err := slab.New(slab.Config{Record: slab.RecordSCS, Policy: machine.PerCPU, PAC: true})
	if err != nil {
		panic(err)
	}
	reports, err := s.Demo()
	if err != nil {
		panic(err)
	}
	for _, r := range reports {
		fmt.Printf("%s in %s by %s/%d\n", r.Kind, r.CallTraceFuncs()[0], r.Task, r.PID)
		fmt.Printf("  allocated by %d: %s\n", r.AllocPID, strings.Join(r.AllocFuncs()[:3], " <- "))
		fmt.Printf("  freed by %d:     %s\n", r.FreePID, strings.Join(r.FreeFuncs()[:3], " <- "))
	}
	// Output:
	// use-after-free in skb_copy_bits by netd/412
	//   allocated by 412: __alloc_skb <- tcp_data_queue <- tcp_v4_rcv
	//   freed by 1337:     dev_kfree_skb_irq <- net_tx_action <- handle_irq_desc
	// use-after-free in ghes_read_estatus by writer/1337
	//   allocated by 1337: hrtimer_alloc_event <- hrtimer_run_queues <- timer_interrupt
	//   freed by 37:     kfree_rcu_work <- rcu_do_batch <- rcu_core
	// double-free in seq_release by writer/1337
	//   allocated by 1337: kvmalloc_node <- seq_buf_alloc <- seq_write
	//   freed by 1337:     seq_release <- __fput <- __arm64_sys_close
}
