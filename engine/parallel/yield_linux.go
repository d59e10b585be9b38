package parallel

import "syscall"

// osYield gives the rest of this thread's time slice to any other runnable thread of
// the machine (sched_yield). An idle worker calls it as it polls, so that another
// process's thread (a worker process's parent relaying its tokens, say) runs at once
// instead of preempting a thread that is doing a part of the work.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
