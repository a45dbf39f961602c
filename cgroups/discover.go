package cgroups

import (
	"fmt"
	"path"
	"strings"
)

// Mesos environment variables that name the container nodeinit runs in.
const (
	// EnvMesosDirectory is the sandbox of an executor, which the agent
	// sets for every containerizer: .../runs/<container id>.
	EnvMesosDirectory = "MESOS_DIRECTORY"
	// EnvMesosSandbox is the sandbox as the container sees it. For a
	// nested container of the Mesos containerizer, which gets no
	// MESOS_DIRECTORY, it is .../runs/<parent>/containers/<child>; with a
	// root filesystem of its own it is /mnt/mesos/sandbox, which names no
	// container.
	EnvMesosSandbox = "MESOS_SANDBOX"
	// EnvMesosContainerName is set by the Docker containerizer only: the
	// Docker container, mesos-<container id> (Mesos up to 0.22 and from
	// 1.4) or mesos-<agent id>.<container id> (0.23 to 1.3), with
	// ".executor" after it for a custom executor run in Docker.
	EnvMesosContainerName = "MESOS_CONTAINER_NAME"
)

// nestedSeparator is the cgroup element the Mesos containerizer puts
// between a container and each container nested in it (CGROUP_SEPARATOR in
// the agent), whatever its --cgroups_root.
const nestedSeparator = "mesos"

// target is what Discover found: the cgroup to join, if any, and the
// container.
type target struct {
	// Cgroup is the absolute cgroup path to join, such as /mesos/<id>;
	// empty when nodeinit stays where it was started.
	Cgroup string
	// ContainerID is the Mesos container id, empty when no Mesos variable
	// names one.
	ContainerID string
	// InOwn says nodeinit stays in the cgroup its container runtime put it
	// in, and that cgroup is the container's own: a task of the Docker
	// containerizer, which lives in the engine's cgroup (/docker/<hash>,
	// system.slice/docker-<hash>.scope), where the agent writes its limits,
	// and never in a /mesos/<id>.
	InOwn bool
	// Source says where the target came from, for the log.
	Source string
}

// discover finds the cgroup to join from --cgroup-parent (parent), the
// agent's --cgroups_root (prefix) and the Mesos variables, which getenv
// looks up (os.Getenv in nodeinit, a map in tests). parent and prefix are
// valid settings (config validates them).
//
// An explicit parent wins. Otherwise MESOS_CONTAINER_NAME marks a Docker
// containerizer task, which stays where the engine put it; a Mesos
// containerizer's container is /<prefix>/<id>, a nested one
// /<prefix>/<parent>/mesos/<child>, found from MESOS_SANDBOX (nested) or
// MESOS_DIRECTORY. Without any of them nodeinit stays too.
func discover(parent, prefix string, getenv func(string) string) (target, error) {
	var t target
	var chain []string
	if name := getenv(EnvMesosContainerName); name != "" {
		id, err := containerOfDockerName(name)
		if err != nil {
			return target{}, err
		}
		t.ContainerID, t.InOwn = id, true
		t.Source = EnvMesosContainerName + "=" + name
	} else {
		c, source, err := mesosContainers(getenv)
		if err != nil {
			return target{}, err
		}
		chain, t.Source = c, source
		if len(chain) > 0 {
			t.ContainerID = chain[len(chain)-1]
		}
	}

	if parent != "" {
		t.Cgroup, t.InOwn, t.Source = path.Clean(parent), false, "--cgroup-parent"
		return t, nil
	}
	if len(chain) > 0 {
		t.Cgroup = "/" + strings.Trim(prefix, "/") + "/" + strings.Join(chain, "/"+nestedSeparator+"/")
	}
	return t, nil
}

// mesosContainers returns the Mesos containerizer's container chain,
// outermost first, and the variable it came from: MESOS_SANDBOX when it
// names a nested container (a nested container has no MESOS_DIRECTORY of
// its own, though a debug container inherits its parent's), else
// MESOS_DIRECTORY, else a MESOS_SANDBOX of the .../runs/<id> shape.
func mesosContainers(getenv func(string) string) ([]string, string, error) {
	sandbox := getenv(EnvMesosSandbox)
	chain, shaped, err := containersOfSandbox(EnvMesosSandbox, sandbox)
	if err != nil {
		return nil, "", err
	}
	if shaped && len(chain) > 1 {
		return chain, EnvMesosSandbox + "=" + sandbox, nil
	}
	if dir := getenv(EnvMesosDirectory); dir != "" {
		c, shaped, err := containersOfSandbox(EnvMesosDirectory, dir)
		if err != nil {
			return nil, "", err
		}
		if !shaped {
			// Not the agent's layout: its last element, as the Mesos
			// minion took it.
			last := ""
			if elems := strings.FieldsFunc(dir, isSlash); len(elems) > 0 {
				last = elems[len(elems)-1]
			}
			if err := checkID(EnvMesosDirectory, last); err != nil {
				return nil, "", err
			}
			c = []string{last}
		}
		return c, EnvMesosDirectory + "=" + dir, nil
	}
	if shaped {
		return chain, EnvMesosSandbox + "=" + sandbox, nil
	}
	return nil, "", nil
}

// containersOfSandbox returns the container ids a Mesos sandbox directory
// names, outermost first: .../runs/<p> gives [p], and
// .../runs/<p>/containers/<c> gives [p c]. shaped is false for a directory
// of another shape (/mnt/mesos/sandbox, say), which names none.
func containersOfSandbox(env, dir string) (chain []string, shaped bool, err error) {
	elems := strings.FieldsFunc(dir, isSlash)
	// Walk back over "containers/<id>" pairs to a "runs/<id>" pair.
	i := len(elems) - 1
	for i >= 1 && elems[i-1] == "containers" {
		chain = append([]string{elems[i]}, chain...)
		i -= 2
	}
	if i < 1 || elems[i-1] != "runs" {
		return nil, false, nil
	}
	chain = append([]string{elems[i]}, chain...)
	for _, id := range chain {
		if err := checkID(env, id); err != nil {
			return nil, true, err
		}
	}
	return chain, true, nil
}

// containerOfDockerName takes the container id out of the name the Mesos
// Docker containerizer gives its containers: mesos-<id>,
// mesos-<agent>.<id>, either with .executor after it. Neither id contains a
// dot.
func containerOfDockerName(name string) (string, error) {
	// docker inspect writes the name with a leading slash.
	rest, ok := strings.CutPrefix(strings.TrimPrefix(name, "/"), "mesos-")
	if !ok {
		return "", fmt.Errorf("%s=%q does not start with mesos-", EnvMesosContainerName, name)
	}
	rest = strings.TrimSuffix(rest, ".executor")
	if i := strings.LastIndexByte(rest, '.'); i >= 0 {
		rest = rest[i+1:]
	}
	if err := checkID(EnvMesosContainerName, rest); err != nil {
		return "", err
	}
	return rest, nil
}

func isSlash(r rune) bool { return r == '/' }

func checkID(env, id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\n") {
		return fmt.Errorf("%s gives %q, which is not a container id", env, id)
	}
	return nil
}
