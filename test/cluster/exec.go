package cluster

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// run runs a program, bounded, and returns its standard output; its
// standard error's last lines go into the error when it fails.
func run(timeout time.Duration, name string, args ...string) (string, error) {
	return runIn(timeout, nil, name, args...)
}

func runIn(timeout time.Duration, stdin io.Reader, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = stdin
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v", timeout)
	}
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, tail(string(out), 10), tail(stderr.String(), 20))
	}
	return string(out), nil
}
