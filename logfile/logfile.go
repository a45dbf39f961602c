// Package logfile owns the children's log files: with --log-dir, the
// executor's and the proxy's stdout and stderr go to DIR/executor.log and
// DIR/proxy.log, rotated by size into NAME-<UTC time>.log backups, of which
// MaxBackups are kept, none older than MaxAgeDays.
//
// A child gets the write end of a pipe as its fd 1 and 2 (a child needs a
// real file descriptor). One Pump copies from every task's pipe to that
// task's file in a single goroutine that waits on all the read ends with
// epoll: nothing the supervisor waits on, and a slow disk only makes the
// children block on a full pipe. Close is bounded: a write that a hung log
// volume never completes cannot hold nodeinit's exit.
//
// Why epoll, and not a goroutine per pipe reading an os.File on the Go
// runtime's poller, which needs no epoll set or eventfd of its own: a task
// that logs as klog does makes a write(2) per line, and a pump woken for
// every line costs nodeinit about half of what the task spends writing. So after a round that found little the pump pauses for a
// millisecond and then takes what came in one read. That saves the wakeups
// only if nothing waits on the pipes during the pause; the runtime's poller
// keeps every pipe in its epoll set and is woken by every write, whatever
// the reading goroutine does. nodeinit's CPU per GiB in the log-throughput
// benchmark (1 GiB of 200-byte lines, one write(2) each, rotated at 10 MiB;
// 2-core VM, medians of three runs, with a 64 KiB buffer; writing 1 GiB in
// 64 KiB writes costs 0.42 s of CPU by itself):
//
//	epoll pump                     4.72 s
//	goroutine per pipe             3.33 s
//	epoll pump, pausing            1.75 s
//	goroutine per pipe, pausing    4.33 s
//
// With the buffer at 1 MiB, as now, the pausing epoll pump took 0.94 and
// 1.06 s in two runs, the pausing goroutines 3.33 and 4.25 s. Throughput
// does not decide: in every variant the --log-dir path was 1.0 to 1.66
// times as fast as the writer writing its own file (a write to a pipe costs
// the writer less than one to a file, and the pump writes on the other
// core), with more spread between runs than between variants. The goroutine
// variant was measured in this package's history, behind the build tag
// goroutinepump, and left out after.
//
// Lines are kept whole: the pump writes to a file only up to the last newline
// it has read, so a rotation, which happens between two writes, never splits
// a line, and every line lands in exactly one file. A line longer than the
// pump's buffer (1 MiB) is written in pieces as it comes. A write that fails
// (a full disk) drops what it was given, whole, and the next write tries
// again: the pump never stops reading, so a full disk blocks no task and
// nothing of nodeinit's. What is dropped is counted in lines and bytes; one
// line says when the loss starts, and one how much was lost once a write
// works again with room on the disk (or when the file closes first), at
// most one of each a minute per task however often the disk fills and
// frees. A write that fits in the file's last page works on a full disk
// too; it ends no loss.
//
// nodeinit runs as root, so its files must not be a way in: the directory
// must be owned by root or nodeinit's user and writable by no one else
// (checked at start, as sshd's StrictModes checks a user's files), and it is
// held open, so that every open, rename and removal is relative to it and
// follows no symbolic link.
package logfile

import "fmt"

// Rotation says where the log files live and when they are rotated.
type Rotation struct {
	// Dir holds NAME.log for every task, and its rotated backups
	// NAME-<UTC time>.log. It is created (0755) if missing.
	Dir string
	// MaxSizeMiB is the size in MiB at which a file is rotated; at least 1.
	MaxSizeMiB int
	// MaxBackups is how many rotated files are kept per task; 0 keeps all.
	MaxBackups int
	// MaxAgeDays removes rotated files older than this many days; 0 keeps
	// them whatever their age.
	MaxAgeDays int
}

// validate rejects a rotation that makes no sense.
func (r Rotation) validate() error {
	switch {
	case r.Dir == "":
		return fmt.Errorf("log dir is empty")
	case r.MaxSizeMiB < 1:
		return fmt.Errorf("max log size %d MiB is below the minimum of 1 MiB", r.MaxSizeMiB)
	case r.MaxBackups < 0:
		return fmt.Errorf("max log backups %d is negative", r.MaxBackups)
	case r.MaxAgeDays < 0:
		return fmt.Errorf("max log age %d days is negative", r.MaxAgeDays)
	}
	return nil
}
