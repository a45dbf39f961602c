// Package logfile owns the children's log files: with --log-dir, the
// executor's and the proxy's stdout and stderr go to DIR/executor.log and
// DIR/proxy.log, rotated by size with lumberjack.
//
// A child gets the write end of a pipe as its fd 1 and 2, never a lumberjack
// writer (a child needs a real file descriptor). One Pump copies from every
// task's pipe to that task's rotating file in a single goroutine that waits on
// all the read ends with epoll, so there is no goroutine per child and
// nothing the supervisor waits on: a slow disk only makes the children block
// on a full pipe.
//
// Lines are kept whole: the pump writes to a file only up to the last newline
// it has read, so a rotation, which happens between two writes, never splits
// a line, and every line lands in exactly one file. A line longer than the
// pump's buffer (64 KiB) is written in pieces as it comes.
package logfile

import (
	"fmt"
	"path/filepath"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Rotation says where the log files live and when they are rotated.
type Rotation struct {
	// Dir holds NAME.log for every task, and its rotated backups
	// NAME-<UTC timestamp>.log. It is created (0755) if missing.
	Dir string
	// MaxSizeMiB is the size in MiB at which a file is rotated; at least 1.
	MaxSizeMiB int
	// MaxBackups is how many rotated files are kept per task; 0 keeps all.
	MaxBackups int
	// MaxAgeDays removes rotated files older than this many days; 0 keeps
	// them whatever their age.
	MaxAgeDays int
}

// validate rejects a rotation that lumberjack would silently reinterpret
// (a MaxSize of 0 means 100 MB to it).
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

// Path returns the file that the task named name logs to.
func (r Rotation) Path(name string) string {
	return filepath.Join(r.Dir, name+".log")
}

func (r Rotation) logger(name string) *lumberjack.Logger {
	return &lumberjack.Logger{
		Filename:   r.Path(name),
		MaxSize:    r.MaxSizeMiB,
		MaxBackups: r.MaxBackups,
		MaxAge:     r.MaxAgeDays,
	}
}

// distinctBackupName waits, when needed, until the wall clock has left the
// millisecond of the previous rotation. lumberjack names a backup after the
// current time to the millisecond and renames over an existing file of that
// name, so two rotations of one file within a millisecond (1 MiB written in
// under 1 ms) would lose the older backup.
func distinctBackupName(lastRotation time.Time) {
	last := lastRotation.Truncate(time.Millisecond)
	for {
		now := time.Now().Truncate(time.Millisecond)
		if now.After(last) {
			return
		}
		time.Sleep(last.Add(time.Millisecond).Sub(now))
	}
}
