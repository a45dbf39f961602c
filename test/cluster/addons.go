package cluster

import (
	"fmt"
	"strings"
	"time"
)

// flannelManifest is flannel's own (its chart's templates, v0.28.10) with
// the images loaded into the nodes, the vxlan backend and the cluster's
// pod CIDR: the kube subnet manager takes each node's pod CIDR, which the
// controller-manager allocates, and flanneld routes the other nodes' over
// vxlan. The CNI plugin (/opt/cni/bin/flannel, installed by the init
// container) hands each pod to the bridge and host-local plugins of the
// node with the node's subnet.
const flannelManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: kube-flannel
  labels: {k8s-app: flannel, pod-security.kubernetes.io/enforce: privileged}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: flannel, namespace: kube-flannel}
---
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: flannel}
rules:
- apiGroups: [""]
  resources: [pods, nodes, namespaces]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [patch]
---
kind: ClusterRoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: flannel}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: flannel}
subjects:
- {kind: ServiceAccount, name: flannel, namespace: kube-flannel}
---
kind: ConfigMap
apiVersion: v1
metadata:
  name: kube-flannel-cfg
  namespace: kube-flannel
  labels: {tier: node, app: flannel}
data:
  cni-conf.json: |
    {
      "name": "cbr0",
      "cniVersion": "0.3.1",
      "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
        {"type": "portmap", "capabilities": {"portMappings": true}}
      ]
    }
  net-conf.json: |
    {
      "Network": "{{.PodCIDR}}",
      "Backend": {"Type": "vxlan"}
    }
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-flannel-ds
  namespace: kube-flannel
  labels: {tier: node, app: flannel}
spec:
  selector:
    matchLabels: {app: flannel}
  template:
    metadata:
      labels: {tier: node, app: flannel}
    spec:
      hostNetwork: true
      priorityClassName: system-node-critical
      tolerations:
      - {operator: Exists, effect: NoSchedule}
      - {operator: Exists, effect: NoExecute}
      serviceAccountName: flannel
      initContainers:
      - name: install-cni-plugin
        image: {{.FlannelImage}}
        command: [cp]
        args: [-f, /flannel, /opt/cni/bin/flannel]
        volumeMounts:
        - {name: cni-plugin, mountPath: /opt/cni/bin}
      - name: install-cni
        image: {{.FlannelImage}}
        command: [/opt/bin/install-conf]
        args: [/etc/kube-flannel/cni-conf.json, /etc/cni/net.d/10-flannel.conflist]
        volumeMounts:
        - {name: cni, mountPath: /etc/cni/net.d}
        - {name: flannel-cfg, mountPath: /etc/kube-flannel/}
      containers:
      - name: kube-flannel
        image: {{.FlannelImage}}
        command: [/opt/bin/flanneld, --ip-masq, --kube-subnet-mgr]
        resources:
          requests: {cpu: 100m, memory: 50Mi}
        securityContext:
          privileged: false
          capabilities: {add: [NET_ADMIN, NET_RAW]}
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        - {name: EVENT_QUEUE_DEPTH, value: "5000"}
        - {name: CONT_WHEN_CACHE_NOT_READY, value: "false"}
        volumeMounts:
        - {name: run, mountPath: /run/flannel}
        - {name: flannel-cfg, mountPath: /etc/kube-flannel/}
        - {name: xtables-lock, mountPath: /run/xtables.lock}
      volumes:
      - {name: run, hostPath: {path: /run/flannel}}
      - {name: cni-plugin, hostPath: {path: /opt/cni/bin}}
      - {name: cni, hostPath: {path: /etc/cni/net.d}}
      - {name: flannel-cfg, configMap: {name: kube-flannel-cfg}}
      - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
`

// coreDNSManifest is CoreDNS as kubeadm deploys it: a Deployment of two
// behind the kube-dns Service at the cluster's DNS address, the Corefile
// kubeadm writes, the RBAC it needs.
const coreDNSManifest = `apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
- {kind: ServiceAccount, name: coredns, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
           lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
           pods insecure
           fallthrough in-addr.arpa ip6.arpa
           ttl 30
        }
        prometheus :9153
        forward . /etc/resolv.conf {
           max_concurrent 1000
        }
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 2
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: 1}
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      priorityClassName: system-cluster-critical
      serviceAccountName: coredns
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              labelSelector:
                matchExpressions:
                - {key: k8s-app, operator: In, values: [kube-dns]}
              topologyKey: kubernetes.io/hostname
      tolerations:
      - {key: CriticalAddonsOnly, operator: Exists}
      dnsPolicy: Default
      containers:
      - name: coredns
        image: {{.CoreDNSImage}}
        args: [-conf, /etc/coredns/Corefile]
        resources:
          limits: {memory: 170Mi}
          requests: {cpu: 100m, memory: 70Mi}
        volumeMounts:
        - {name: config-volume, mountPath: /etc/coredns, readOnly: true}
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        - {containerPort: 9153, name: metrics, protocol: TCP}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {add: [NET_BIND_SERVICE], drop: [ALL]}
          readOnlyRootFilesystem: true
        livenessProbe:
          httpGet: {path: /health, port: 8080, scheme: HTTP}
          initialDelaySeconds: 60
          timeoutSeconds: 5
          successThreshold: 1
          failureThreshold: 5
        readinessProbe:
          httpGet: {path: /ready, port: 8181, scheme: HTTP}
      volumes:
      - name: config-volume
        configMap:
          name: coredns
          items:
          - {key: Corefile, path: Corefile}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: {{.DNSIP}}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
  - {name: metrics, port: 9153, protocol: TCP}
`

// addonManifest is a manifest with the cluster's names filled in.
func addonManifest(text string) string {
	return strings.NewReplacer("{{.PodCIDR}}", PodCIDR, "{{.FlannelImage}}", FlannelImage,
		"{{.CoreDNSImage}}", CoreDNSImage, "{{.DNSIP}}", DNSIP).Replace(text)
}

// applyAddons creates flannel's and CoreDNS's objects; their pods run
// once the nodes come.
func (c *Cluster) applyAddons() error {
	for _, m := range []string{flannelManifest, coreDNSManifest} {
		if _, err := c.KubectlIn(2*time.Minute, addonManifest(m), "apply", "-f", "-"); err != nil {
			return err
		}
	}
	return nil
}

// waitAddons waits until flannel runs on every node and CoreDNS is
// available.
func (c *Cluster) waitAddons() error {
	if err := c.kubectl(5*time.Minute, "rollout", "status", "--namespace=kube-flannel", "daemonset/kube-flannel-ds", "--timeout=300s"); err != nil {
		return fmt.Errorf("flannel: %w", err)
	}
	if err := c.kubectl(5*time.Minute, "rollout", "status", "--namespace=kube-system", "deployment/coredns", "--timeout=300s"); err != nil {
		return fmt.Errorf("CoreDNS: %w", err)
	}
	return nil
}
