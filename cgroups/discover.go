package cgroups

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Mesos environment variables that name the container nodeinit runs in.
const (
	// EnvMesosDirectory is the sandbox of a task of the Mesos containerizer:
	// .../runs/<container id>, or .../runs/<parent>/containers/<child> for a
	// nested container.
	EnvMesosDirectory = "MESOS_DIRECTORY"
	// EnvMesosContainerName is the Docker container of a task of the Mesos
	// Docker containerizer: mesos-<container id> or
	// mesos-<agent id>.<container id>.
	EnvMesosContainerName = "MESOS_CONTAINER_NAME"
)

// Target is the cgroup nodeinit should move into, as found by Discover.
type Target struct {
	// Cgroup is an absolute cgroup path such as /mesos/<id>; empty when
	// nothing names one and nodeinit stays where the runtime put it.
	Cgroup string
	// ContainerID is the Mesos container id, empty when no Mesos variable
	// names one.
	ContainerID string
	// Source says where Cgroup came from, for the log.
	Source string
}

// Discover finds the cgroup to join. An explicit parent (--cgroup-parent)
// wins; otherwise the Mesos container id from MESOS_DIRECTORY or, where that
// is unset, MESOS_CONTAINER_NAME gives /<prefix>/<id> (with
// /<prefix>/<parent>/<prefix>/<child> for a nested container). getenv looks
// a variable up (os.Getenv in nodeinit, a map in tests).
func Discover(parent, prefix string, getenv func(string) string) (Target, error) {
	prefix = strings.Trim(prefix, "/")
	var t Target
	var chain []string
	if dir := getenv(EnvMesosDirectory); dir != "" {
		c, err := containersOfSandbox(dir)
		if err != nil {
			return Target{}, err
		}
		chain = c
		t.Source = EnvMesosDirectory + "=" + dir
	} else if name := getenv(EnvMesosContainerName); name != "" {
		id, err := containerOfDockerName(name)
		if err != nil {
			return Target{}, err
		}
		chain = []string{id}
		t.Source = EnvMesosContainerName + "=" + name
	}
	if len(chain) > 0 {
		t.ContainerID = chain[len(chain)-1]
	}

	if parent != "" {
		if !strings.HasPrefix(parent, "/") || slices.Contains(strings.Split(parent, "/"), "..") {
			return Target{}, fmt.Errorf("--cgroup-parent %q is not a clean absolute cgroup path such as /kubepods/node", parent)
		}
		t.Cgroup = path.Clean(parent)
		t.Source = "--cgroup-parent"
		return t, nil
	}
	if len(chain) == 0 {
		return t, nil
	}
	// Every element must name a cgroup: an empty or "." one would make the
	// result an unclean path, which the kernel resolves but /proc/self/cgroup
	// never shows, so joining it could not be verified.
	if slices.ContainsFunc(strings.Split(prefix, "/"), func(e string) bool { return e == "" || e == "." || e == ".." }) {
		return Target{}, fmt.Errorf("--mesos-cgroup-prefix %q is not a relative cgroup path such as mesos", prefix)
	}
	cgroup := ""
	for _, id := range chain {
		cgroup += "/" + prefix + "/" + id
	}
	t.Cgroup = cgroup
	return t, nil
}

// containersOfSandbox returns the container ids a Mesos sandbox directory
// names, outermost first: .../runs/<p>/containers/<c> gives [p c]; a
// directory of another shape gives its last element.
func containersOfSandbox(dir string) ([]string, error) {
	elems := strings.FieldsFunc(dir, func(r rune) bool { return r == '/' })
	if len(elems) == 0 {
		return nil, fmt.Errorf("%s=%q names no container", EnvMesosDirectory, dir)
	}
	last := elems[len(elems)-1]
	if err := checkID(EnvMesosDirectory, last); err != nil {
		return nil, err
	}
	// Walk back over "containers/<id>" pairs to a "runs/<id>" pair.
	var chain []string
	i := len(elems) - 1
	for i >= 1 && elems[i-1] == "containers" {
		chain = append([]string{elems[i]}, chain...)
		i -= 2
	}
	if i >= 1 && elems[i-1] == "runs" {
		chain = append([]string{elems[i]}, chain...)
		for _, id := range chain {
			if err := checkID(EnvMesosDirectory, id); err != nil {
				return nil, err
			}
		}
		return chain, nil
	}
	return []string{last}, nil
}

// containerOfDockerName takes the container id out of the name the Mesos
// Docker containerizer gives its containers.
func containerOfDockerName(name string) (string, error) {
	rest, ok := strings.CutPrefix(name, "mesos-")
	if !ok {
		return "", fmt.Errorf("%s=%q does not start with mesos-", EnvMesosContainerName, name)
	}
	// Older agents put "<agent id>." before the container id; neither id
	// contains a dot.
	if i := strings.LastIndexByte(rest, '.'); i >= 0 {
		rest = rest[i+1:]
	}
	if err := checkID(EnvMesosContainerName, rest); err != nil {
		return "", err
	}
	return rest, nil
}

func checkID(env, id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\n") {
		return fmt.Errorf("%s gives %q, which is not a container id", env, id)
	}
	return nil
}
