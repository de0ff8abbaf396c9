package kernel

import "fmt"

// threadKeys are the members Threads reads (from BTF).
var threadKeys = []string{"task_struct.tgid", "task_struct.signal", "task_struct.thread_node", "signal_struct.thread_head"}

// Threads returns every thread of every thread group: the leaders of the
// task list ([Kernel.Tasks], from start), each followed by the other
// threads of its group, in the order of signal->thread_head
// (for_each_thread, kernel/sched.h: task_struct.thread_node). At most
// 65,536 tasks are read; an error comes with the threads read before it.
func (k *Kernel) Threads(start uint64) ([]Task, error) {
	leaders, err := k.Tasks(start)
	if err != nil && len(leaders) == 0 {
		return nil, err
	}
	sig, e1 := k.offset("task_struct.signal")
	node, e2 := k.offset("task_struct.thread_node")
	head, e3 := k.offset("signal_struct.thread_head")
	if e1 != nil || e2 != nil || e3 != nil {
		return leaders, fmt.Errorf("%s: thread lists unknown (task_struct.signal, task_struct.thread_node or signal_struct.thread_head not in the BTF): leaders only", k.V.Path)
	}
	var out []Task
	for _, l := range leaders {
		out = append(out, l)
		s, rerr := k.read64(l.Addr + sig)
		if rerr != nil || s == 0 {
			continue // an exiting task, or the idle task's static signal
		}
		h := s + head
		seen := map[uint64]bool{}
		n, rerr := k.read64(h)
		for rerr == nil && n != h && !seen[n] {
			seen[n] = true
			if len(out) >= maxTasks {
				return out, fmt.Errorf("%s: more than %d tasks", k.V.Path, maxTasks)
			}
			t := n - node
			if t != l.Addr {
				th, terr := k.readTask(t)
				if terr != nil {
					return out, terr
				}
				out = append(out, th)
			}
			n, rerr = k.read64(n)
		}
		if rerr != nil {
			return out, fmt.Errorf("task %#x (pid %d): thread list: %w", l.Addr, l.PID, rerr)
		}
	}
	return out, err
}
