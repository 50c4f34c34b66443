package deploy_test

import (
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomize's Kustomization these folders use; anything else in one is an
// unknown field (decoded strictly, as the manifests are).
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name   string `json:"name"`
		NewTag string `json:"newTag"`
	} `json:"images"`
}

// manifests decodes a kustomization folder strictly: every resource into its k8s.io/api type, no
// unknown field anywhere.
type manifests struct {
	deployment *appsv1.Deployment
	service    *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	pvc        *corev1.PersistentVolumeClaim
	images     []string
}

func decodeStrict(t *testing.T, path string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(read(t, path)), into); err != nil {
		t.Fatalf("%s does not decode strictly: %v", path, err)
	}
}

func loadManifests(t *testing.T, dir string) manifests {
	t.Helper()
	var k kustomization
	decodeStrict(t, filepath.Join(dir, "kustomization.yaml"), &k)
	if k.Kind != "Kustomization" {
		t.Fatalf("%s/kustomization.yaml: kind %q", dir, k.Kind)
	}
	var m manifests
	for _, img := range k.Images {
		m.images = append(m.images, img.Name)
	}
	for _, r := range k.Resources {
		path := filepath.Join(dir, r)
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(read(t, path)), &meta); err != nil {
			t.Fatal(err)
		}
		var into any
		switch meta.Kind {
		case "Deployment":
			m.deployment = &appsv1.Deployment{}
			into = m.deployment
		case "Service":
			m.service = &corev1.Service{}
			into = m.service
		case "PodDisruptionBudget":
			m.pdb = &policyv1.PodDisruptionBudget{}
			into = m.pdb
		case "PersistentVolumeClaim":
			m.pvc = &corev1.PersistentVolumeClaim{}
			into = m.pvc
		default:
			t.Fatalf("%s: kind %q", path, meta.Kind)
		}
		decodeStrict(t, path, into)
	}
	if m.deployment == nil || m.service == nil {
		t.Fatalf("%s: no Deployment or no Service", dir)
	}
	return m
}

// TestKubernetesManifests decodes deploy/kubernetes (two replicas on a shared store) and
// deploy/kubernetes/sqlite (one replica with its ledger on a PersistentVolumeClaim) strictly, and holds
// their probes, ports, variables, user and secrets to the service's and the image's.
func TestKubernetesManifests(t *testing.T) {
	d := readDockerfile(t)
	uid, _, _ := strings.Cut(d.user, ":")
	// The probes' paths answer on a running service without a token: 200 each.
	p := startServe(t)
	for _, dir := range []string{"deploy/kubernetes", "deploy/kubernetes/sqlite"} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m := loadManifests(t, dir)
			dep := m.deployment
			pod := dep.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers", len(pod.Containers))
			}
			c := pod.Containers[0]
			if repo, _, _ := strings.Cut(c.Image, ":"); repo != image || !slices.Contains(m.images, image) {
				t.Errorf("image %s (kustomization's %v), want %s", c.Image, m.images, image)
			}
			sqlite := dir == "deploy/kubernetes/sqlite"
			replicas := int(*dep.Spec.Replicas)
			switch {
			case sqlite && (replicas != 1 || dep.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || m.pdb != nil || m.pvc == nil):
				t.Errorf("SQLite: %d replicas, strategy %s, PDB %v, PVC %v: want one replica, Recreate, no PDB, a PVC", replicas, dep.Spec.Strategy.Type, m.pdb != nil, m.pvc != nil)
			case !sqlite && (replicas < 2 || m.pdb == nil || m.pdb.Spec.MinAvailable.IntValue() >= replicas || m.pdb.Spec.MinAvailable.IntValue() < 1):
				t.Errorf("%d replicas, PDB %v: want 2 or more and a budget that lets one go", replicas, m.pdb)
			}

			// The port: the image's, named http, and what the Service and the probes and Prometheus use.
			if len(c.Ports) != 1 || strconv.Itoa(int(c.Ports[0].ContainerPort)) != d.expose || c.Ports[0].Name != "http" {
				t.Errorf("container ports %v, want %s (the image's EXPOSE) named http", c.Ports, d.expose)
			}
			if sp := m.service.Spec.Ports; len(sp) != 1 || sp[0].TargetPort != intstr.FromString("http") {
				t.Errorf("the Service's ports %v do not target the container's http port", sp)
			}
			for k, v := range m.service.Spec.Selector {
				if dep.Spec.Template.Labels[k] != v {
					t.Errorf("the Service selects %s=%s, which the pods do not carry", k, v)
				}
			}
			if m.pdb != nil {
				for k, v := range m.pdb.Spec.Selector.MatchLabels {
					if dep.Spec.Template.Labels[k] != v {
						t.Errorf("the PDB selects %s=%s, which the pods do not carry", k, v)
					}
				}
			}
			ann := dep.Spec.Template.Annotations
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != d.expose || ann["prometheus.io/path"] != "/metrics" {
				t.Errorf("Prometheus annotations %v", ann)
			}
			for name, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				want := map[string]string{"readiness": "/readyz", "liveness": "/healthz"}[name]
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port != intstr.FromString("http") {
					t.Errorf("%s probe %+v, want GET %s on http", name, probe, want)
					continue
				}
				if status, _ := call(t, p, probe.HTTPGet.Path); status != http.StatusOK {
					t.Errorf("%s probe's GET %s answers %d", name, probe.HTTPGet.Path, status)
				}
			}

			// Variables: the service's own, files under the secret's mount, the address on the port.
			var names []string
			mounts := map[string]string{} // volume name → mount path
			for _, vm := range c.VolumeMounts {
				mounts[vm.Name] = vm.MountPath
			}
			secretDir := ""
			for _, v := range pod.Volumes {
				if v.Secret != nil {
					secretDir = mounts[v.Name]
				}
				if v.PersistentVolumeClaim != nil && (m.pvc == nil || v.PersistentVolumeClaim.ClaimName != m.pvc.Name) {
					t.Errorf("volume %s claims %s, not the folder's PVC", v.Name, v.PersistentVolumeClaim.ClaimName)
				}
			}
			for _, e := range c.Env {
				names = append(names, e.Name)
				switch {
				case strings.HasSuffix(e.Name, "_FILE") && (secretDir == "" || !strings.HasPrefix(e.Value, secretDir+"/")):
					t.Errorf("%s=%s is not a file of the secret's volume (%s)", e.Name, e.Value, secretDir)
				case e.Name == "COMPANION_ADDR" && e.Value != "0.0.0.0:"+d.expose:
					t.Errorf("COMPANION_ADDR=%s, not the container's port", e.Value)
				case e.Name == "COMPANION_DATA_DIR" && !slices.Contains(mountPaths(c), e.Value):
					t.Errorf("COMPANION_DATA_DIR=%s is not a mounted volume", e.Value)
				}
			}
			if unknown := unknownVars(names, theServiceReads(t)); len(unknown) > 0 {
				t.Errorf("the container is given variables companion serve --help and docs/configuration.md do not name: %v", unknown)
			}
			if !slices.Contains(names, "COMPANION_TOKENS_FILE") {
				t.Error("no tokens: on 0.0.0.0 the service refuses to start without them")
			}
			if sqlite != slices.Contains(names, "COMPANION_DATA_DIR") {
				t.Errorf("SQLite %v, COMPANION_DATA_DIR given %v", sqlite, !sqlite)
			}

			// Non-root as the image's user, read-only root, no escalation, no capabilities.
			psc, sc := pod.SecurityContext, c.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || strconv.FormatInt(*psc.RunAsUser, 10) != uid {
				t.Errorf("pod securityContext %+v, want non-root as the image's user %s", psc, uid)
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("container securityContext %+v", sc)
			}
			if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
				t.Errorf("resources %+v", c.Resources)
			}
		})
	}
}

func mountPaths(c corev1.Container) []string {
	var out []string
	for _, vm := range c.VolumeMounts {
		out = append(out, vm.MountPath)
	}
	return out
}
