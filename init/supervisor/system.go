package supervisor

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/init/footprint"
	"github.com/nodeinit/nodeinit/init/oomscore"
	"github.com/nodeinit/nodeinit/init/proctree"
	"github.com/nodeinit/nodeinit/init/reaper"
	"github.com/nodeinit/nodeinit/internal/linux"
)

// system is what the supervisor asks of the kernel and the clock: starting
// and reaping children, signalling processes, timers. The real one is
// kernel; the supervisor's tests give it a fake, to step through its states
// without processes or the wall clock.
type system interface {
	Start(path string, argv []string, attr *syscall.ProcAttr) (pid int, err error)
	Reap() (exits []reaper.Exit, none bool, err error)
	Orphans() uint64
	// Kill signals one process (pid > 0) or a process group (pid < 0).
	Kill(pid int, sig syscall.Signal) error
	// KillRest signals every process nodeinit is responsible for: as PID 1
	// every process of its pid namespace, else every descendant.
	KillRest(sig syscall.Signal) error
	// Leftovers describes the processes KillRest would signal, for the
	// last log line when some cannot be reaped.
	Leftovers() []string
	// Describe names one process for the log.
	Describe(pid int) string
	Now() time.Time
	NewTimer() timer
}

// timer is a time.Timer that starts stopped.
type timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// kernel is the real system.
type kernel struct {
	reaper   *reaper.Reaper
	oom      *oomscore.Score
	thp      *footprint.HugePages
	isInit   bool
	self     int
	procRoot string
}

func newKernel(procRoot string, oom *oomscore.Score, thp *footprint.HugePages) *kernel {
	pid := os.Getpid()
	return &kernel{reaper: reaper.New(), oom: oom, thp: thp, isInit: pid == 1, self: pid, procRoot: procRoot}
}

// Start starts a child at the OOM score adjustment nodeinit started with,
// and with the kernel's transparent-huge-page setting, not nodeinit's.
func (k *kernel) Start(path string, argv []string, attr *syscall.ProcAttr) (pid int, err error) {
	fork := func() { pid, err = k.reaper.Start(path, argv, attr) }
	if e := k.thp.Fork(func() {
		if e := k.oom.Fork(fork); e != nil {
			klog.ErrorS(e, "Cannot hand a child the OOM score adjustment nodeinit started with", "path", path)
		}
	}); e != nil {
		klog.ErrorS(e, "Cannot hand a child the kernel's transparent-huge-page setting", "path", path)
	}
	return pid, err
}

func (k *kernel) Reap() ([]reaper.Exit, bool, error) { return k.reaper.Reap() }
func (k *kernel) Orphans() uint64                    { return k.reaper.Orphans() }

func (k *kernel) Kill(pid int, sig syscall.Signal) error { return linux.Kill(pid, sig) }

// KillRest uses kill(-1) as PID 1: it reaches every process of the
// namespace at once, and a process forking meanwhile cannot escape it. A
// subreaper cannot use it (it would signal the whole host) and signals the
// descendants it finds; one forked after the walk is found by the next.
func (k *kernel) KillRest(sig syscall.Signal) error {
	if k.isInit {
		if err := linux.Kill(-1, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("every process of the namespace: %w", err)
		}
		return nil
	}
	pids, err := proctree.Descendants(k.procRoot, k.self)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		_ = linux.Kill(pid, sig)
	}
	return nil
}

// Leftovers lists every descendant: as PID 1 that is every process of the
// namespace too.
func (k *kernel) Leftovers() []string {
	pids, err := proctree.Descendants(k.procRoot, k.self)
	if err != nil {
		return []string{"cannot list: " + err.Error()}
	}
	out := make([]string, len(pids))
	for i, pid := range pids {
		out[i] = proctree.Describe(k.procRoot, pid)
	}
	return out
}

func (k *kernel) Describe(pid int) string { return proctree.Describe(k.procRoot, pid) }

func (k *kernel) Now() time.Time { return time.Now() }

func (k *kernel) NewTimer() timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return wallTimer{t}
}

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time   { return w.t.C }
func (w wallTimer) Reset(d time.Duration) { w.t.Reset(d) }
func (w wallTimer) Stop()                 { w.t.Stop() }
