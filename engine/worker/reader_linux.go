package worker

import (
	"runtime"
	"syscall"
	"unsafe"
)

const (
	schedNormal      = 0          // SCHED_OTHER
	schedBatch       = 3          // SCHED_BATCH
	schedResetOnFork = 0x40000000 // SCHED_RESET_ON_FORK: threads cloned from this one start normal
)

// readerThread locks the calling goroutine to its thread and puts the thread in the
// SCHED_BATCH class until the returned func undoes both: the kernel never lets a
// batch thread preempt a running thread when it wakes; it runs at once on an idle
// core, else when a running thread yields (the matrix pool's idle threads do, as
// they poll) or at the next scheduler tick. The parent's reader wakes for every
// write of the worker, and the worker's decode step waits for its slowest part: a
// wake-up that preempts one of its matrix threads costs the step the wake-up's time
// on both cores. Threads that the Go runtime clones from this one start in the normal
// class. The thread must outlive the goroutine (the caller runs the returned func):
// a locked thread ends with its goroutine, and the children a thread started get
// their PDEATHSIG when it ends (other workers, say). Best effort: an error leaves the
// thread in the normal class.
func readerThread() (undo func()) {
	runtime.LockOSThread()
	setSched(schedBatch | schedResetOnFork)
	return func() {
		setSched(schedNormal)
		runtime.UnlockOSThread()
	}
}

func setSched(policy int) {
	var param struct{ priority int32 }
	syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, uintptr(policy), uintptr(unsafe.Pointer(&param)))
}
