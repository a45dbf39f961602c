//go:build k8s

package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// api is a client of the kube-apiserver over plain HTTPS with the admin's
// client certificate: enough of the REST API for the tests (get, create,
// delete, list and watch), without client-go.
type api struct {
	base   string
	client *http.Client
}

// statusError is a response other than 2xx, with the server's message.
type statusError struct {
	Code    int
	Message string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Message) }

func isNotFound(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// do sends one request; body, when not nil, is sent as JSON, and a 2xx
// response is decoded into out when out is not nil.
func (a *api) do(ctx context.Context, method, path string, body []byte, out any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var st struct{ Message string }
		if json.Unmarshal(data, &st) != nil || st.Message == "" {
			st.Message = strings.TrimSpace(string(data))
		}
		return &statusError{resp.StatusCode, fmt.Sprintf("%s %s: %s", method, path, st.Message)}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

func (a *api) get(ctx context.Context, path string, out any) error {
	return a.do(ctx, http.MethodGet, path, nil, out)
}

// create posts a manifest written in YAML to the collection at path.
func (a *api) create(ctx context.Context, path, manifest string) error {
	body, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		return fmt.Errorf("manifest for %s: %w", path, err)
	}
	return a.do(ctx, http.MethodPost, path, body, nil)
}

// remove deletes the object or collection at path at once (no grace
// period); one that is not there is no error.
func (a *api) remove(ctx context.Context, path string) error {
	err := a.do(ctx, http.MethodDelete, path, []byte(`{"gracePeriodSeconds":0}`), nil)
	if isNotFound(err) {
		return nil
	}
	return err
}

// watchUntil lists the collection at path (with query, e.g. a field
// selector), then watches it from the list's resourceVersion, and returns
// the items as soon as done holds for them; it fails when ctx ends first.
// done is evaluated on the list and after every event, so a wait ends on
// the event that makes it true, not on a timer.
func watchUntil[T any](ctx context.Context, a *api, path string, query url.Values, key func(T) string, done func([]T) bool) ([]T, error) {
	var last []T
	for {
		var list struct {
			Metadata struct{ ResourceVersion string }
			Items    []T
		}
		if err := a.get(ctx, path+"?"+query.Encode(), &list); err != nil {
			return last, err
		}
		items := map[string]T{}
		order := func() []T {
			out := make([]T, 0, len(items))
			for _, it := range items {
				out = append(out, it)
			}
			return out
		}
		for _, it := range list.Items {
			items[key(it)] = it
		}
		if last = order(); done(last) {
			return last, nil
		}
		gone, err := watchFrom(ctx, a, path, query, list.Metadata.ResourceVersion, func(kind string, it T) bool {
			if kind == "DELETED" {
				delete(items, key(it))
			} else {
				items[key(it)] = it
			}
			last = order()
			return done(last)
		})
		if err != nil || !gone {
			return last, err
		}
		// The resourceVersion is too old to watch from: list again.
	}
}

// watchFrom streams the events of one watch and hands each to event until
// it returns true (nil error) or the stream ends. gone reports that the
// server refused the resourceVersion (410), which calls for a new list.
func watchFrom[T any](ctx context.Context, a *api, path string, query url.Values, rv string, event func(string, T) bool) (gone bool, err error) {
	for {
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		q.Set("watch", "true")
		q.Set("resourceVersion", rv)
		if dl, ok := ctx.Deadline(); ok {
			q.Set("timeoutSeconds", fmt.Sprint(int(time.Until(dl).Seconds())+1))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path+"?"+q.Encode(), nil)
		if err != nil {
			return false, err
		}
		resp, err := a.client.Do(req)
		if err != nil {
			return false, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return resp.StatusCode == http.StatusGone, &statusError{resp.StatusCode, "watch " + path}
		}
		dec := json.NewDecoder(resp.Body)
		for {
			var ev struct {
				Type   string
				Object json.RawMessage
			}
			if err := dec.Decode(&ev); err != nil {
				break // the server ended the watch: watch again from rv
			}
			if ev.Type == "ERROR" {
				resp.Body.Close()
				return true, nil
			}
			var m struct {
				Metadata struct{ ResourceVersion string }
			}
			if json.Unmarshal(ev.Object, &m) == nil && m.Metadata.ResourceVersion != "" {
				rv = m.Metadata.ResourceVersion
			}
			if ev.Type == "BOOKMARK" {
				continue
			}
			var it T
			if err := json.Unmarshal(ev.Object, &it); err != nil {
				resp.Body.Close()
				return false, err
			}
			if event(ev.Type, it) {
				resp.Body.Close()
				return false, nil
			}
		}
		resp.Body.Close()
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
	}
}

// The parts of the API objects the tests read. encoding/json matches the
// API's lowerCamelCase names to these fields without tags.

type objectMeta struct {
	Name              string
	Namespace         string
	UID               string
	ResourceVersion   string
	Labels            map[string]string
	DeletionTimestamp *time.Time
}

type condition struct {
	Type               string
	Status             string
	Reason             string
	Message            string
	LastHeartbeatTime  time.Time
	LastTransitionTime time.Time
}

type node struct {
	Metadata objectMeta
	Spec     struct {
		Taints []struct{ Key, Effect string }
	}
	Status struct {
		Conditions []condition
		Addresses  []struct{ Type, Address string }
		Capacity   map[string]string
		// Allocatable is what the scheduler may place: capacity less the
		// kubelet's reservations.
		Allocatable map[string]string
		NodeInfo    struct{ KubeletVersion, MachineID, ContainerRuntimeVersion string }
	}
}

// condition returns the node's condition of type t.
func (n node) condition(t string) condition {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return condition{}
}

func (n node) ready() bool { return n.condition("Ready").Status == "True" }

type pod struct {
	Metadata objectMeta
	Spec     struct {
		NodeName string
		Volumes  []struct {
			Name      string
			Projected *struct {
				Sources []struct {
					ServiceAccountToken *struct{ Path string }
				}
			}
		}
		Containers []struct {
			Name         string
			VolumeMounts []struct{ Name, MountPath string }
		}
	}
	Status struct {
		Phase             string
		Reason, Message   string
		PodIP             string
		Conditions        []condition
		ContainerStatuses []containerStatus
	}
}

// containerStatus is one container's status in its pod's.
type containerStatus struct {
	Name         string
	Ready        bool
	RestartCount int
	ContainerID  string
	LastState    struct {
		Terminated *struct {
			ExitCode int
			Reason   string
		}
	}
	State struct {
		Waiting *struct{ Reason string }
	}
}

func (p pod) ready() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// tokenMount is where the pod's service-account token is mounted in its
// first container, from the projected volume that holds the token; empty
// when there is none.
func (p pod) tokenMount() string {
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken == nil || len(p.Spec.Containers) == 0 {
				continue
			}
			for _, m := range p.Spec.Containers[0].VolumeMounts {
				if m.Name == v.Name {
					return m.MountPath + "/" + s.ServiceAccountToken.Path
				}
			}
		}
	}
	return ""
}

type service struct {
	Metadata objectMeta
	Spec     struct{ ClusterIP string }
}
