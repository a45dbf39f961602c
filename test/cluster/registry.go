package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// registryPort is where a cluster's registry listens, on the host's
// address on the cluster's network: each cluster has an address of its
// own, so two clusters' registries do not meet.
const registryPort = "5000"

// certsDir is where the nodes' containerd looks for a registry's hosts
// (config_path in images/node-runtime/containerd.toml), as in kind's node
// image: a directory per registry host, read at each pull.
const certsDir = "/etc/containerd/certs.d"

// registryConfig is docker-registry's configuration: its store in a
// directory, plain HTTP on one address, no authentication, warnings only
// in its log (an access line per blob would fill it).
const registryConfig = `version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`

// Registry is a Docker registry (Debian's docker-registry) on the host's
// address on the cluster's network, which the nodes' containerd uses as a
// mirror of a registry this machine cannot reach: an image whose pull
// policy is Always is then pulled as on a connected cluster, from the
// images pushed into it.
type Registry struct {
	// Addr is host:port, as the nodes reach it.
	Addr string

	c    *Cluster
	cmd  *exec.Cmd
	done chan error
	log  string
}

// StartRegistry starts docker-registry with its images in store and its
// configuration and log in dir, and waits until it answers. Stop ends it.
// A store holds no address: one filled once serves any cluster later.
func (c *Cluster) StartRegistry(store, dir string) (*Registry, error) {
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		return nil, errors.New("docker-registry is not installed (Debian's docker-registry package): a cluster's registry needs it")
	}
	for _, d := range []string{store, dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	addr := net.JoinHostPort(c.Gateway, registryPort)
	conf := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, registryConfig, store, addr), 0o644); err != nil {
		return nil, err
	}
	r := &Registry{Addr: addr, c: c, done: make(chan error, 1), log: filepath.Join(dir, "registry.log")}
	logFile, err := os.Create(r.log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	r.cmd = exec.Command(bin, "serve", conf)
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { r.done <- r.cmd.Wait() }()
	if err := r.waitServing(30 * time.Second); err != nil {
		_ = r.Stop()
		return nil, err
	}
	return r, nil
}

// waitServing waits until the registry answers its API's base, /v2/.
func (r *Registry) waitServing(timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get("http://" + r.Addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		select {
		case werr := <-r.done:
			r.done <- werr
			return fmt.Errorf("docker-registry on %s ended (%v):\n%s", r.Addr, werr, r.logTail())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("docker-registry on %s did not answer within %v: %v\n%s", r.Addr, timeout, err, r.logTail())
		}
	}
}

func (r *Registry) logTail() string {
	b, _ := os.ReadFile(r.log)
	return tail(string(b), 20)
}

// Push loads each image archive into the cluster's podman store and pushes
// every image it names into the registry, under the same path without its
// registry host (registry.k8s.io/e2e-test-images/agnhost:2.66.1 becomes
// Addr/e2e-test-images/agnhost:2.66.1), where a mirror's client asks for
// it; an image that is the first of a pair in aliases is pushed under the
// second name too. The store keeps only the images it had before.
func (r *Registry) Push(archives []string, aliases [][2]string) error {
	had := map[string]bool{}
	out, err := r.c.podman.run(time.Minute, "images", "--format", "{{.Repository}}:{{.Tag}}")
	if err != nil {
		return err
	}
	for name := range strings.FieldsSeq(out) {
		had[name] = true
	}
	for _, a := range archives {
		out, err := r.c.podman.run(5*time.Minute, "load", "-i", a)
		if err != nil {
			return err
		}
		images := podmanLoaded(out)
		if len(images) == 0 {
			return fmt.Errorf("podman load %s named no image:\n%s", a, out)
		}
		for _, image := range images {
			names := []string{image}
			for _, alias := range aliases {
				if alias[0] == image {
					names = append(names, alias[1])
				}
			}
			for _, name := range names {
				dest := r.Addr + "/" + withoutHost(name)
				if _, err := r.c.podman.run(10*time.Minute, "push", "-q", "--tls-verify=false", image, dest); err != nil {
					return err
				}
			}
		}
		var added []string
		for _, image := range images {
			if !had[image] {
				added = append(added, image)
			}
		}
		if len(added) > 0 {
			if _, err := r.c.podman.run(time.Minute, append([]string{"rmi"}, added...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// ImageArchive is the archive of one of the images the cluster loads into
// its nodes (PauseImage, say).
func (c *Cluster) ImageArchive(image string) string { return c.archive(image) }

// podmanLoaded are the names podman load's output gives: "Loaded image:
// NAME" a line, or "Loaded image(s): A,B".
func podmanLoaded(out string) []string {
	var names []string
	for line := range strings.Lines(out) {
		_, list, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || !strings.HasPrefix(line, "Loaded image") {
			continue
		}
		for n := range strings.SplitSeq(list, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}
	return names
}

// withoutHost is an image reference's path and tag without its registry
// host: the first element when it names a host (a dot, a colon or
// localhost), as the Docker reference grammar reads it.
func withoutHost(image string) string {
	first, rest, ok := strings.Cut(image, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return rest
	}
	return image
}

// hostsTOML makes addr, plain HTTP, the mirror the nodes' containerd pulls
// and resolves registry's images from first; registry itself stays the
// server after it.
const hostsTOML = `server = "https://%s"

[host."http://%s"]
  capabilities = ["pull", "resolve"]
`

// Mirror makes the registry the mirror of registry (registry.k8s.io, say)
// in every node's containerd: a hosts.toml in its certs.d, read at the
// next pull. Unmirror takes it away.
func (r *Registry) Mirror(registry string) error {
	dir := path.Join(certsDir, registry)
	toml := fmt.Sprintf(hostsTOML, registry, r.Addr)
	return r.c.eachNode(func(node string) error {
		_, err := r.c.podman.run(time.Minute, "exec", node, "sh", "-c",
			`mkdir -p "$1" && printf '%s' "$2" > "$1/hosts.toml"`, "sh", dir, toml)
		if err != nil {
			return fmt.Errorf("the mirror of %s in node %s: %w", registry, node, err)
		}
		return nil
	})
}

// Unmirror takes the mirror of registry away from every node.
func (r *Registry) Unmirror(registry string) error {
	return r.c.eachNode(func(node string) error {
		_, err := r.c.podman.run(time.Minute, "exec", node, "rm", "-rf", path.Join(certsDir, registry))
		return err
	})
}

// Stop ends the registry and waits for it.
func (r *Registry) Stop() error {
	select {
	case err := <-r.done:
		r.done <- err
		return fmt.Errorf("docker-registry on %s had ended: %v\n%s", r.Addr, err, r.logTail())
	default:
	}
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	return nil
}
