package main

import (
	"os"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nodeinit/nodeinit/config"
	"github.com/nodeinit/nodeinit/identity"
	"github.com/nodeinit/nodeinit/mountns"
	"github.com/nodeinit/nodeinit/node"
)

// The node's machine-id and product_uuid: decided from the configuration,
// mounted at start, described by --write-flags.

// identityOptions are the identity settings: the generated ids are kept in
// identity.dir, else in nodeinit/ of the kubelet's root directory.
func identityOptions(cfg *config.Config) identity.Options {
	dir := cfg.Identity.Dir
	if dir == "" {
		dir = filepath.Join(node.KubeletRootDir(cfg.Executor.Args), "nodeinit")
	}
	return identity.Options{Root: "/", StateDir: dir, ImageMachineID: cfg.Identity.ImageMachineID, PID1: os.Getpid() == 1,
		MachineID: cfg.Identity.MachineID, ProductUUID: cfg.Identity.ProductUUID}
}

// nodeIdentity settles the node's machine-id (and, when asked, its
// product_uuid) before the kubelet starts and reads them: a valid id of the
// container's own is left alone; otherwise the id identity decides on (the
// host's, where the container shares the host's pid namespace, or one kept
// in the identity dir) is bind-mounted over the file, but only where the
// mount namespace is nodeinit's own (mountns.Own): in one it may share with
// the host nothing is mounted. Each part that cannot be done is one warning
// saying what the node has instead; what was done is logged either way.
func nodeIdentity(cfg *config.Config) {
	plan, err := identity.Decide(identityOptions(cfg))
	for _, err := range each(err) {
		klog.Warning(sentence(err))
	}
	done, err := plan.Apply(mountns.Own())
	for _, err := range each(err) {
		klog.Warning(sentence(err))
	}
	for _, a := range done {
		a.Log()
	}
}

// sentence is an error as a log line: capitalized.
func sentence(err error) string {
	s := err.Error()
	return strings.ToUpper(s[:1]) + s[1:]
}

// each is the errors an errors.Join holds, one per line to log.
func each(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err != nil {
		return []error{err}
	}
	return nil
}
