// Package kube renders a session as Kubernetes manifests (aisb kube): a
// ConfigMap with the policy, a Secret with the gate's files, and a Pod (or
// an agent-sandbox SandboxTemplate) whose init container installs the
// table, whose gate container is the only uid allowed out, and whose agent
// container runs as the agent with nothing to drop. Built from the
// k8s.io/api types; Decode reads them back strictly.
package kube

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/aisb-dev/aisb/contract"
)

// Paths inside the pod's containers.
const (
	EntrypointPath = "/usr/local/bin/aisb-entrypoint" // in the sandbox image
	ProjectDir     = "/project"                       // the agent's working directory
	gateFileDir    = "/etc/aisb-gate"                 // the Secret, in the gate container only
	gateRunDir     = "/run/aisb-gate"                 // the gate's emptyDir
)

// Container names, in the order they start.
const (
	InitName  = "table"
	GateName  = "gate"
	AgentName = "agent"
)

// Options are a rendered session: everything is already decided (the CLI's
// configuration, flags and narrowing); this package only shapes it.
type Options struct {
	Name         string // a DNS label: the Pod's, and the ConfigMap's and Secret's prefix
	Namespace    string // "" leaves it to kubectl's context
	SandboxImage string // the agent's and the init container's image (aisb image build)
	GateImage    string // the gate's
	Command      []string
	Env          map[string]string
	Policy       contract.Policy   // a pod's: GateUID set
	GateFiles    map[string][]byte // the Secret: squid.conf and the TLS files
	GateCommand  []string
	TTY          bool   // an interactive harness: stdin and a terminal for kubectl attach
	Memory       string // a Kubernetes quantity for the agent's memory limit; "" none
	CPUs         string // a Kubernetes quantity for the agent's CPU limit; "" none
}

// Manifests are the rendered objects.
type Manifests struct {
	ConfigMap *corev1.ConfigMap
	Secret    *corev1.Secret
	Pod       *corev1.Pod
}

// ErrOptions is wrapped by every refusal of Render.
var ErrOptions = errors.New("render kubernetes manifests")

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$`)

func optErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrOptions, fmt.Sprintf(format, args...))
}

// Render builds the ConfigMap, the Secret and the Pod.
func Render(o Options) (*Manifests, error) {
	switch {
	case !dnsLabel.MatchString(o.Name):
		return nil, optErr("name %q: want a DNS label of at most 42 characters (a-z, 0-9, -); give --name", o.Name)
	case o.Namespace != "" && !dnsLabel.MatchString(o.Namespace):
		return nil, optErr("namespace %q: want a DNS label", o.Namespace)
	case o.SandboxImage == "" || o.GateImage == "":
		return nil, optErr("the sandbox and gate images are needed; give --image-prefix (a registry your cluster pulls from)")
	case len(o.Command) == 0:
		return nil, optErr("no command")
	case o.Policy.GateUID == 0:
		return nil, optErr("the policy has no gate uid: not a pod's policy")
	case o.GateFiles["squid.conf"] == nil:
		return nil, optErr("the gate has no squid.conf")
	}
	policy, err := o.Policy.Marshal()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	limits := corev1.ResourceList{}
	for name, q := range map[corev1.ResourceName]string{corev1.ResourceMemory: o.Memory, corev1.ResourceCPU: o.CPUs} {
		if q == "" {
			continue
		}
		v, err := resource.ParseQuantity(q)
		if err != nil {
			return nil, optErr("limit %s %q: %v", name, q, err)
		}
		limits[name] = v
	}
	labels := map[string]string{"app.kubernetes.io/name": "aisb", "app.kubernetes.io/instance": o.Name}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: maps.Clone(labels)}
	}
	m := &Manifests{
		ConfigMap: &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: meta(o.Name + "-policy"),
			Data:       map[string]string{contract.PolicyFile: string(policy)},
			Immutable:  ptr(true),
		},
		Secret: &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: meta(o.Name + "-gate"),
			Type:       corev1.SecretTypeOpaque,
			Data:       maps.Clone(o.GateFiles),
			Immutable:  ptr(true),
		},
	}
	spec := podSpec(o, m.ConfigMap.Name, m.Secret.Name, limits)
	m.Pod = &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta(o.Name),
		Spec:       spec,
	}
	return m, nil
}

// podSpec is the pod: three containers in one network namespace.
func podSpec(o Options, configMap, secret string, limits corev1.ResourceList) corev1.PodSpec {
	gateUID := int64(o.Policy.GateUID)
	agent := int64(contract.AgentUID)
	root := int64(0)
	mount := func(name, path string, ro bool) corev1.VolumeMount {
		return corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: ro}
	}
	var env []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(o.Env)) {
		env = append(env, corev1.EnvVar{Name: k, Value: o.Env[k]})
	}
	memory := corev1.StorageMediumMemory
	record, project := o.Name+"-record", o.Name+"-project"
	return corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: ptr(false),
		EnableServiceLinks:           ptr(false),
		// Each container has a process namespace of its own: the agent
		// sees no process of the gate.
		ShareProcessNamespace: ptr(false),
		HostNetwork:           false,
		SecurityContext: &corev1.PodSecurityContext{
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		// The init container installs and verifies the table in the
		// pod's network namespace before any other container starts: it
		// alone has CAP_NET_ADMIN, and nothing else.
		InitContainers: []corev1.Container{{
			Name:    InitName,
			Image:   o.SandboxImage,
			Command: []string{EntrypointPath, "table"},
			SecurityContext: &corev1.SecurityContext{
				RunAsUser: &root, RunAsGroup: &root, RunAsNonRoot: ptr(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
				AllowPrivilegeEscalation: ptr(false),
				ReadOnlyRootFilesystem:   ptr(true),
				Privileged:               ptr(false),
			},
			VolumeMounts: []corev1.VolumeMount{mount("policy", contract.PolicyDir, true), mount(record, contract.PodDir, false)},
		}},
		Containers: []corev1.Container{
			{
				// The gate: squid on the pod's loopback, as the one uid
				// the table lets out. Its log is its stdout.
				Name:    GateName,
				Image:   o.GateImage,
				Command: o.GateCommand,
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: &gateUID, RunAsGroup: &gateUID, RunAsNonRoot: ptr(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					AllowPrivilegeEscalation: ptr(false),
					ReadOnlyRootFilesystem:   ptr(true),
					Privileged:               ptr(false),
				},
				VolumeMounts: []corev1.VolumeMount{mount("gate-files", gateFileDir, true), mount("gate-run", gateRunDir, false), mount("gate-tmp", "/tmp", false)},
			},
			{
				// The agent: the agent's uid from its first instruction,
				// no capability, no_new_privs; its entrypoint checks the
				// init's record of the table before it execs the command.
				Name:       AgentName,
				Image:      o.SandboxImage,
				Command:    append([]string{EntrypointPath, "pod", "--"}, o.Command...),
				WorkingDir: ProjectDir,
				Env:        env,
				Stdin:      o.TTY,
				TTY:        o.TTY,
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: &agent, RunAsGroup: &agent, RunAsNonRoot: ptr(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					AllowPrivilegeEscalation: ptr(false),
					Privileged:               ptr(false),
				},
				Resources:    corev1.ResourceRequirements{Limits: limits},
				VolumeMounts: []corev1.VolumeMount{mount("policy", contract.PolicyDir, true), mount(record, contract.PodDir, true), mount(project, ProjectDir, false)},
			},
		},
		Volumes: []corev1.Volume{
			{Name: "policy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}},
			{Name: "gate-files", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}},
			// The init's record, shared with the agent: on disk, since
			// podman kube play makes a memory emptyDir a tmpfs per container.
			// It and the project are named for the pod: podman kube play
			// names a volume for an emptyDir by its name alone, and two
			// pods would share one.
			{Name: record, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "gate-run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: memory}}},
			{Name: "gate-tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: memory}}},
			// The project: an empty directory the agent clones into; the
			// host's project is not copied (docs/kubernetes.md).
			{Name: project, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
}

// NameFor is the default name of a project's pod: aisb- and the project
// directory's name, lower-cased, every other character a dash.
func NameFor(projectDir string) string {
	base := strings.ToLower(filepath.Base(projectDir))
	var b strings.Builder
	for _, r := range base {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := strings.Trim("aisb-"+b.String(), "-")
	if len(name) > 42 {
		name = strings.TrimRight(name[:42], "-")
	}
	return name
}

func ptr[T any](v T) *T { return &v }
