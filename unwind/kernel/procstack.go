package kernel

import (
	"fmt"

	"github.com/unwindkit/unwindkit/unwind"
)

// ProcStackDepth is MAX_STACK_TRACE_DEPTH of fs/proc/base.c: the most
// entries /proc/PID/stack prints.
const ProcStackDepth = 64

// ProcStack returns the lines /proc/PID/stack prints for a task whose
// walk gave frames (fs/proc/base.c proc_pid_stack: "[<0>] %pB" per entry
// of stack_trace_save_tsk, kernel/stacktrace.c): the return addresses in
// the scheduler's and the locks' text (in_sched_functions:
// [__sched_text_start, __sched_text_end) and [__lock_text_start,
// __lock_text_end)) are left out, at most ProcStackDepth are kept, and
// each is formatted as %pB does ([Kernel.FormatBacktrace]). It fails when
// the symbols lack those section bounds.
func (k *Kernel) ProcStack(fs []unwind.Frame) ([]string, error) {
	var ranges [][2]uint64
	for _, sec := range []string{"sched", "lock"} {
		lo, ok1 := k.sym["__"+sec+"_text_start"]
		hi, ok2 := k.sym["__"+sec+"_text_end"]
		if !ok1 || !ok2 || hi < lo {
			return nil, fmt.Errorf("%s: __%s_text_start/__%s_text_end not among the symbols: which frames /proc/PID/stack omits is unknown", k.V.Path, sec, sec)
		}
		ranges = append(ranges, [2]uint64{lo, hi})
	}
	var out []string
	for _, f := range fs {
		skip := false
		for _, r := range ranges {
			skip = skip || f.PC >= r[0] && f.PC < r[1]
		}
		if skip {
			continue
		}
		if len(out) == ProcStackDepth {
			break
		}
		out = append(out, "[<0>] "+k.FormatBacktrace(f.PC))
	}
	return out, nil
}
