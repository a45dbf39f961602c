package logfile_test

import (
	"log"
	"os/exec"

	"github.com/nodeinit/nodeinit/logfile"
)

// The supervisor hands the same write end to every process of a task, and
// closes the pump once every child has exited.
func Example() {
	pump, err := logfile.NewPump(logfile.Rotation{Dir: "/var/log/nodeinit", MaxSizeMiB: 10, MaxBackups: 5, MaxAgeDays: 7})
	if err != nil {
		log.Fatal(err) // names the directory
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

	if err := pump.Close(); err != nil { // after the last child has exited
		log.Print(err)
	}
}
