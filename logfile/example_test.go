package logfile_test

import (
	"log"
	"os/exec"
	"time"

	"github.com/nodeinit/nodeinit/logfile"
)

// The supervisor hands the same write end to every process of a task, and
// closes the pump once every child has exited.
func Example() {
	pump, err := logfile.NewPump(logfile.Rotation{Dir: "/var/log/nodeinit", MaxSizeMiB: 10, MaxBackups: 5, MaxAgeDays: 7})
	if err != nil {
		log.Fatal(err) // names the directory, and the rule an unsafe one breaks
	}
	executorOut, err := pump.Add("executor")
	if err != nil {
		log.Fatal(err)
	}
	proxyOut, err := pump.Add("proxy")
	if err != nil {
		log.Fatal(err)
	}
	pump.Start()

	executor := exec.Command("kubelet")
	executor.Stdout, executor.Stderr = executorOut, executorOut
	proxy := exec.Command("kube-proxy")
	proxy.Stdout, proxy.Stderr = proxyOut, proxyOut // and for every respawn
	// ... start, supervise, reap ...

	if err := pump.Close(2 * time.Second); err != nil { // after the last child has exited; bounded
		log.Print(err)
	}
}
