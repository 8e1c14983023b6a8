package kube

import (
	"bytes"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// SandboxTemplateAPIVersion is agent-sandbox's extensions API
// (kubernetes-sigs/agent-sandbox v1.0).
const SandboxTemplateAPIVersion = "extensions.agents.x-k8s.io/v1alpha1"

// SandboxTemplate is agent-sandbox's SandboxTemplate, the part of it aisb
// fills: a typed struct of our own (agent-sandbox's Go module is not a
// dependency), with the pod template of the k8s.io/api types.
type SandboxTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SandboxTemplateSpec `json:"spec"`
}

// SandboxTemplateSpec holds the pod template.
type SandboxTemplateSpec struct {
	PodTemplate PodTemplate `json:"podTemplate"`
}

// PodTemplate is agent-sandbox's PodTemplate: labels and annotations, and
// the pod's spec.
type PodTemplate struct {
	Metadata PodMetadata    `json:"metadata,omitempty"`
	Spec     corev1.PodSpec `json:"spec"`
}

// PodMetadata is agent-sandbox's PodMetadata.
type PodMetadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Template is the Pod as an agent-sandbox SandboxTemplate of the same name.
func (m *Manifests) Template() *SandboxTemplate {
	return &SandboxTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: SandboxTemplateAPIVersion, Kind: "SandboxTemplate"},
		ObjectMeta: m.Pod.ObjectMeta,
		Spec:       SandboxTemplateSpec{PodTemplate: PodTemplate{Metadata: PodMetadata{Labels: m.Pod.Labels}, Spec: m.Pod.Spec}},
	}
}

// YAML is the manifests as one multi-document YAML stream: the ConfigMap,
// the Secret, then the Pod or, with template, the SandboxTemplate.
func (m *Manifests) YAML(template bool) ([]byte, error) {
	objs := []any{m.ConfigMap, m.Secret, m.Pod}
	if template {
		objs[2] = m.Template()
	}
	var b bytes.Buffer
	for i, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("render kubernetes manifests: %w", err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

// ErrManifest is wrapped when Decode meets an object it does not know or a
// field its type has not.
var ErrManifest = errors.New("not a manifest aisb kube renders")

// Decode reads a YAML stream back strictly: every document one of the kinds
// aisb renders, no field its type does not have, no field twice.
func Decode(b []byte) ([]any, error) {
	var out []any
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w: %v", i, ErrManifest, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 Secret":
			obj = &corev1.Secret{}
		case "v1 Pod":
			obj = &corev1.Pod{}
		case SandboxTemplateAPIVersion + " SandboxTemplate":
			obj = &SandboxTemplate{}
		default:
			return nil, fmt.Errorf("document %d: %w: %s %s", i, ErrManifest, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("document %d (%s): %w: %v", i, tm.Kind, ErrManifest, err)
		}
		out = append(out, obj)
	}
	return out, nil
}
