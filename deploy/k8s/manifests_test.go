// Package k8s holds the Kubernetes manifests of lmlite (docs/KUBERNETES.md) and the test
// that validates them offline: each document is decoded strictly into its typed object
// (k8s.io/api through apimachinery's strict serializer; KEDA's two kinds into the
// structs below, which carry the fields of KEDA's own API types that we use), so an
// unknown or misspelt field fails, and the invariants that tie the manifests to the
// code are checked: probes and resources set, the containers' commands are lmlite
// subcommands with flags they have, the ConfigMap is a valid lmlite config, names and
// ports agree, and the memory request covers the weights, the KV pool and 64 MiB.
//
// Only this package imports k8s.io: nothing else in the module depends on it.
package k8s

import (
	"bufio"
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/lmlite/lmlite/configs"
)

// ScaledObject is keda.sh/v1alpha1 ScaledObject: the fields of KEDA's
// apis/keda/v1alpha1 ScaledObjectSpec that the manifests may use.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Advanced              *struct {
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
			HorizontalPodAutoscalerConfig *struct {
				Name     string               `json:"name,omitempty"`
				Behavior *autoscalingBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
			MetricType string `json:"metricType,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// autoscalingBehavior is autoscaling/v2 HorizontalPodAutoscalerBehavior (KEDA embeds it).
type autoscalingBehavior struct {
	ScaleUp   *scalingRules `json:"scaleUp,omitempty"`
	ScaleDown *scalingRules `json:"scaleDown,omitempty"`
}

type scalingRules struct {
	StabilizationWindowSeconds *int32 `json:"stabilizationWindowSeconds,omitempty"`
	SelectPolicy               string `json:"selectPolicy,omitempty"`
	Policies                   []struct {
		Type          string `json:"type"`
		Value         int32  `json:"value"`
		PeriodSeconds int32  `json:"periodSeconds"`
	} `json:"policies,omitempty"`
}

// HTTPScaledObject is http.keda.sh/v1alpha1 HTTPScaledObject (the KEDA HTTP add-on's
// operator/apis/http/v1alpha1 HTTPScaledObjectSpec).
type HTTPScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Hosts          []string `json:"hosts,omitempty"`
		PathPrefixes   []string `json:"pathPrefixes,omitempty"`
		ScaleTargetRef struct {
			Name       string `json:"name"`
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Service    string `json:"service"`
			Port       int32  `json:"port,omitempty"`
			PortName   string `json:"portName,omitempty"`
		} `json:"scaleTargetRef"`
		Replicas *struct {
			Min *int32 `json:"min,omitempty"`
			Max *int32 `json:"max,omitempty"`
		} `json:"replicas,omitempty"`
		CooldownPeriod        *int32 `json:"scaledownPeriod,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		ScalingMetric         *struct {
			Concurrency *struct {
				TargetValue int `json:"targetValue"`
			} `json:"concurrency,omitempty"`
			Rate *struct {
				TargetValue int             `json:"targetValue"`
				Window      metav1.Duration `json:"window"`
				Granularity metav1.Duration `json:"granularity"`
			} `json:"requestRate,omitempty"`
		} `json:"scalingMetric,omitempty"`
		Timeouts *struct {
			ConditionWait  metav1.Duration `json:"conditionWait"`
			ResponseHeader metav1.Duration `json:"responseHeader"`
		} `json:"timeouts,omitempty"`
	} `json:"spec"`
}

// Kustomization is the part of kustomize's Kustomization the directory uses.
type Kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

var codec = func() *serializerjson.Serializer {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, s, s, serializerjson.SerializerOptions{Yaml: true, Strict: true})
}()

// decode decodes one YAML document strictly into its typed object.
func decode(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := sigsyaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var into any
	switch tm.APIVersion + " " + tm.Kind {
	case "keda.sh/v1alpha1 ScaledObject":
		into = &ScaledObject{}
	case "http.keda.sh/v1alpha1 HTTPScaledObject":
		into = &HTTPScaledObject{}
	default:
		obj, _, err := codec.Decode(doc, nil, nil)
		return obj, err
	}
	return into, sigsyaml.UnmarshalStrict(doc, into)
}

// splitDocs splits a multi-document YAML file.
func splitDocs(data []byte) ([][]byte, error) {
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			out = append(out, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// objects are the decoded manifests by kind and name.
type objects struct {
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	pvcs         map[string]*corev1.PersistentVolumeClaim
	pdbs         map[string]*policyv1.PodDisruptionBudget
	scaled       map[string]*ScaledObject
	httpScaled   map[string]*HTTPScaledObject
	namespaces   map[string]*corev1.Namespace
}

func load(t *testing.T) objects {
	t.Helper()
	var k Kustomization
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files, _ := filepath.Glob("*.yaml")
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	if r := slices.Sorted(slices.Values(k.Resources)); !slices.Equal(r, files) {
		t.Errorf("kustomization.yaml lists %v; the directory holds %v", r, files)
	}
	o := objects{map[string]*appsv1.Deployment{}, map[string]*appsv1.StatefulSet{}, map[string]*corev1.Service{},
		map[string]*corev1.ConfigMap{}, map[string]*corev1.PersistentVolumeClaim{}, map[string]*policyv1.PodDisruptionBudget{},
		map[string]*ScaledObject{}, map[string]*HTTPScaledObject{}, map[string]*corev1.Namespace{}}
	for _, f := range k.Resources {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := splitDocs(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i, doc := range docs {
			obj, err := decode(doc)
			if err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
				continue
			}
			switch v := obj.(type) {
			case *appsv1.Deployment:
				o.deployments[v.Name] = v
			case *appsv1.StatefulSet:
				o.statefulSets[v.Name] = v
			case *corev1.Service:
				o.services[v.Name] = v
			case *corev1.ConfigMap:
				o.configMaps[v.Name] = v
			case *corev1.PersistentVolumeClaim:
				o.pvcs[v.Name] = v
			case *policyv1.PodDisruptionBudget:
				o.pdbs[v.Name] = v
			case *ScaledObject:
				o.scaled[v.Name] = v
			case *HTTPScaledObject:
				o.httpScaled[v.Name] = v
			case *corev1.Namespace:
				o.namespaces[v.Name] = v
			default:
				t.Errorf("%s, document %d: unexpected %T", f, i+1, obj)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return o
}

func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selektor: {a: b}}\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers: [{name: c, image: i, readinesProbe: {}}]\n",
		"apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec: {scaleTargetRef: {name: d}, minReplicas: 0}\n",
		"apiVersion: http.keda.sh/v1alpha1\nkind: HTTPScaledObject\nmetadata: {name: x}\nspec: {scaleTargetRef: {name: d, service: s, port: 80}, scaledown: 1}\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n",
	} {
		if _, err := decode([]byte(doc)); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
	if _, err := decode([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selector: {a: b}}\n")); err != nil {
		t.Errorf("a valid Service: %v", err)
	}
}

// lmliteCommands reads cmd/lmlite's sources: each subcommand registered and the flag
// names its function defines.
func lmliteCommands(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../../cmd/lmlite", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]*ast.FuncDecl{}
	var registers []*ast.CallExpr
	for _, p := range pkgs {
		for _, f := range p.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncDecl:
					funcs[n.Name.Name] = n
				case *ast.CallExpr:
					if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "register" && len(n.Args) == 3 {
						registers = append(registers, n)
					}
				}
				return true
			})
		}
	}
	flagsIn := func(body ast.Node) []string {
		var out []string
		ast.Inspect(body, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := c.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			arg := -1
			switch sel.Sel.Name {
			case "String", "Bool", "Int", "Int64", "Uint", "Uint64", "Float64", "Duration", "Func", "BoolFunc":
				arg = 0
			case "StringVar", "BoolVar", "IntVar", "Int64Var", "UintVar", "Uint64Var", "Float64Var", "DurationVar", "Var", "TextVar":
				arg = 1
			}
			if arg >= 0 && len(c.Args) > arg {
				if lit, ok := c.Args[arg].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					out = append(out, s)
				}
			}
			return true
		})
		return out
	}
	cmds := map[string][]string{}
	for _, c := range registers {
		lit, ok := c.Args[0].(*ast.BasicLit)
		if !ok {
			continue
		}
		name, _ := strconv.Unquote(lit.Value)
		switch fn := c.Args[2].(type) {
		case *ast.Ident:
			if d := funcs[fn.Name]; d != nil {
				cmds[name] = flagsIn(d.Body)
			}
		case *ast.FuncLit:
			cmds[name] = flagsIn(fn.Body)
		}
	}
	if len(cmds) < 5 || cmds["serve"] == nil || cmds["pull"] == nil {
		t.Fatalf("could not read the subcommands of cmd/lmlite: %v", cmds)
	}
	return cmds
}

// checkCommand checks that a container runs `lmlite SUB --flags…` with a subcommand
// and flags that exist; it returns the --config value.
func checkCommand(t *testing.T, where string, c corev1.Container, cmds map[string][]string) (config string) {
	t.Helper()
	args := append(slices.Clone(c.Command), c.Args...)
	if len(args) < 2 || args[0] != "lmlite" {
		t.Errorf("%s: command %q is not `lmlite SUBCOMMAND …`", where, args)
		return ""
	}
	flags, ok := cmds[args[1]]
	if !ok {
		t.Errorf("%s: %q is not an lmlite subcommand (%v)", where, args[1], slices.Sorted(mapsKeys(cmds)))
		return ""
	}
	for i := 2; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !slices.Contains(flags, name) {
			t.Errorf("%s: lmlite %s has no flag -%s (it has %v)", where, args[1], name, flags)
		}
		if name == "config" {
			if !hasVal && i+1 < len(args) {
				val = args[i+1]
			}
			config = val
		}
	}
	return config
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// parseConfig parses the ConfigMap's lmlite.yaml with the server's own strict parser
// and validates it. The redis: section belongs to the scale-out work: while configs
// has no such key it is checked for its shape here and removed before the strict parse.
func parseConfig(t *testing.T, text string) (*configs.Config, map[string]string) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(text), &root); err != nil {
		t.Fatal(err)
	}
	redis := map[string]string{}
	if !hasYAMLKey(reflect.TypeFor[configs.Config](), "redis") {
		m := root.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == "redis" {
				if err := m.Content[i+1].Decode(&redis); err != nil {
					t.Fatalf("redis: %v", err)
				}
				for k := range redis {
					if k != "url" && k != "key_prefix" && k != "node_id" {
						t.Errorf("redis.%s: unknown key (url, key_prefix, node_id)", k)
					}
				}
				m.Content = slices.Delete(m.Content, i, i+2)
				t.Log("configs has no redis: key yet (the scale-out work adds it); its shape was checked here")
				break
			}
		}
		b, _ := yaml.Marshal(&root)
		text = string(b)
	} else {
		var f struct {
			Redis map[string]string `yaml:"redis"`
		}
		yaml.Unmarshal([]byte(text), &f)
		redis = f.Redis
	}
	cfg, err := configs.Parse([]byte(text))
	if err != nil {
		t.Fatalf("the ConfigMap's lmlite.yaml: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the ConfigMap's lmlite.yaml: %v", err)
	}
	return cfg, redis
}

func hasYAMLKey(t reflect.Type, key string) bool {
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
			return true
		}
	}
	return false
}

func mountOf(c corev1.Container, path string) (volume string) {
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) == filepath.Clean(path) {
			return m.Name
		}
	}
	return ""
}

func TestManifests(t *testing.T) {
	o := load(t)
	cmds := lmliteCommands(t)

	d := o.deployments["lmlite"]
	if d == nil {
		t.Fatal("no Deployment lmlite")
	}
	pod := d.Spec.Template
	if !selects(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, pod.Labels)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas: %v, want 3", d.Spec.Replicas)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}

	// Every container: resources, a security context, an lmlite command that exists.
	all := append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...)
	var cfgPath string
	for _, c := range all {
		where := "lmlite/" + c.Name
		checkResources(t, where, c)
		if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation is not false", where)
		}
		p := checkCommand(t, where, c, cmds)
		if p == "" {
			t.Errorf("%s: no --config", where)
		}
		if cfgPath != "" && p != cfgPath {
			t.Errorf("%s: --config %s, another container reads %s", where, p, cfgPath)
		}
		cfgPath = p
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("%s: mounts the undeclared volume %q", where, m.Name)
			}
		}
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Command[1] != "pull" {
		t.Errorf("want one init container running lmlite pull, got %d", len(pod.Spec.InitContainers))
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	srv := pod.Spec.Containers[0]
	if srv.Command[1] != "serve" {
		t.Errorf("the container runs %q, not serve", srv.Command[1])
	}

	// The config: mounted from the ConfigMap at --config, valid for the server.
	cfgVol := volumes[mountOf(srv, filepath.Dir(cfgPath))]
	if cfgVol.ConfigMap == nil {
		t.Fatalf("--config %s is not in a mounted ConfigMap", cfgPath)
	}
	cm := o.configMaps[cfgVol.ConfigMap.Name]
	if cm == nil || cm.Data[filepath.Base(cfgPath)] == "" {
		t.Fatalf("ConfigMap %s has no key %s", cfgVol.ConfigMap.Name, filepath.Base(cfgPath))
	}
	cfg, redis := parseConfig(t, cm.Data[filepath.Base(cfgPath)])

	// Ports: listen = the container port = the probes' = the Service's target.
	_, port, _ := strings.Cut(cfg.Listen, ":")
	if !strings.HasPrefix(cfg.Listen, "0.0.0.0:") && !strings.HasPrefix(cfg.Listen, ":") {
		t.Errorf("listen %s is not reachable from outside the pod", cfg.Listen)
	}
	if len(srv.Ports) != 1 || strconv.Itoa(int(srv.Ports[0].ContainerPort)) != port {
		t.Fatalf("container ports %v; listen is %s", srv.Ports, cfg.Listen)
	}
	portName := srv.Ports[0].Name
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startupProbe", srv.StartupProbe, "/healthz"}, {"readinessProbe", srv.ReadinessProbe, "/readyz"}, {"livenessProbe", srv.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != portName {
			t.Errorf("%s: want GET %s on port %q, got %+v", p.name, p.path, portName, p.probe)
		}
	}

	// Storage: data_dir and its pull/ cache are mounted in both containers; the cache
	// is the shared claim.
	for _, c := range all {
		if mountOf(c, cfg.DataDir) == "" {
			t.Errorf("%s: data_dir %s is not mounted", c.Name, cfg.DataDir)
		}
		v := volumes[mountOf(c, filepath.Join(cfg.DataDir, "pull"))]
		if v.PersistentVolumeClaim == nil || o.pvcs[v.PersistentVolumeClaim.ClaimName] == nil {
			t.Errorf("%s: %s/pull is not the model-cache claim", c.Name, cfg.DataDir)
		}
	}
	pulls := 0
	for _, m := range cfg.Models {
		if m.Pull != "" {
			pulls++
		}
	}
	if pulls == 0 {
		t.Error("no model of the config has pull: (the init container would have nothing to do)")
	}
	if !slices.ContainsFunc(srv.Env, func(e corev1.EnvVar) bool { return e.Name == "HF_HUB_OFFLINE" && e.Value == "1" }) {
		t.Error("the server is not offline: it would download at start instead of the init container")
	}

	// Memory: weights + every embedded model's KV pools + 64 MiB ≤ request ≤ limit,
	// and memory_budget covers weights + KV.
	weights, err := strconv.ParseInt(d.Annotations["lmlite.io/weights-bytes"], 10, 64)
	if err != nil {
		t.Fatalf("annotation lmlite.io/weights-bytes: %v", err)
	}
	var kv int64
	for _, m := range cfg.Models {
		if m.Upstream != nil {
			continue
		}
		n, _ := configs.ParseBytes(m.KVCache)
		if n == 0 {
			t.Errorf("model %s: set kv_cache so that the pod's memory can be sized from it", m.ID)
		}
		w, _ := configs.ParseBytes(m.KVWarm)
		kv += (n + w) * int64(m.Replicas)
	}
	need := weights + kv + 64<<20
	req, lim := srv.Resources.Requests[corev1.ResourceMemory], srv.Resources.Limits[corev1.ResourceMemory]
	if req.Value() < need || lim.Cmp(req) < 0 {
		t.Errorf("memory request %s, limit %s; weights %d + KV %d + 64 MiB = %s", req.String(), lim.String(), weights, kv, resource.NewQuantity(need, resource.BinarySI))
	}
	if budget, _ := configs.ParseBytes(cfg.MemoryBudget); budget < weights+kv || budget > req.Value() {
		t.Errorf("memory_budget %s: want between weights + KV (%d) and the memory request", cfg.MemoryBudget, weights+kv)
	}
	if gp := pod.Spec.TerminationGracePeriodSeconds; gp == nil || float64(*gp) <= cfg.ShutdownTimeout.Seconds() {
		t.Errorf("terminationGracePeriodSeconds %v does not leave room for shutdown_timeout %s", gp, cfg.ShutdownTimeout)
	}

	// The Service routes to the pods' named port.
	svc := o.services["lmlite"]
	if svc == nil || !selects(svc.Spec.Selector, pod.Labels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != portName {
		t.Fatalf("Service lmlite does not route to the pods' port %q: %+v", portName, svc)
	}

	// Redis: the config's url names the Redis Service and port.
	if redis["url"] == "" {
		t.Error("the config has no redis.url")
	} else {
		host := strings.TrimPrefix(redis["url"], "redis://")
		host, _, _ = strings.Cut(host, "/")
		name, rport, _ := strings.Cut(host, ":")
		rs := o.services[name]
		if rs == nil || len(rs.Spec.Ports) == 0 || strconv.Itoa(int(rs.Spec.Ports[0].Port)) != rport {
			t.Errorf("redis.url %s names no Service port of the manifests", redis["url"])
		} else if ss := o.statefulSets[name]; ss == nil || !selects(rs.Spec.Selector, ss.Spec.Template.Labels) {
			t.Errorf("Service %s does not select the Redis StatefulSet", name)
		} else {
			for _, c := range ss.Spec.Template.Spec.Containers {
				checkResources(t, name+"/"+c.Name, c)
				if c.ReadinessProbe == nil || c.LivenessProbe == nil {
					t.Errorf("%s/%s: probes not set", name, c.Name)
				}
			}
		}
	}

	// The PodDisruptionBudget covers the pods and never blocks a drain of one replica.
	pdb := o.pdbs["lmlite"]
	if pdb == nil || !selects(pdb.Spec.Selector.MatchLabels, pod.Labels) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget lmlite: %+v", pdb)
	}

	// KEDA: one ScaledObject on the Deployment from zero, fed by the HTTP add-on's
	// scaler (the HTTPScaledObject routing to the Service) and the queue depth.
	so := o.scaled["lmlite"]
	if so == nil || so.Spec.ScaleTargetRef.Name != d.Name || so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != 0 {
		t.Fatalf("ScaledObject lmlite does not scale Deployment lmlite from zero: %+v", so)
	}
	var push, prom bool
	for _, tr := range so.Spec.Triggers {
		switch tr.Type {
		case "external-push":
			h := o.httpScaled[tr.Metadata["httpScaledObject"]]
			if h == nil {
				t.Errorf("external-push trigger names no HTTPScaledObject: %v", tr.Metadata)
				continue
			}
			push = tr.Metadata["scalerAddress"] != ""
			ref := h.Spec.ScaleTargetRef
			if ref.Name != d.Name || ref.Service != svc.Name || ref.Port != svc.Spec.Ports[0].Port {
				t.Errorf("HTTPScaledObject %s targets %+v, not Deployment %s behind Service %s:%d", h.Name, ref, d.Name, svc.Name, svc.Spec.Ports[0].Port)
			}
			if h.Annotations["httpscaledobject.keda.sh/skip-scaledobject-creation"] != "true" {
				t.Errorf("HTTPScaledObject %s would create a second ScaledObject for the Deployment", h.Name)
			}
		case "prometheus":
			prom = true
			q := tr.Metadata["query"]
			src, _ := os.ReadFile("../../gateway/metrics.go")
			metric, _, _ := strings.Cut(strings.TrimPrefix(q, "sum("), "{")
			if metric == "" || !bytes.Contains(src, []byte(`"`+metric+`"`)) {
				t.Errorf("the prometheus trigger's query %q uses a metric the gateway does not export", q)
			}
			if tr.Metadata["ignoreNullValues"] != "true" {
				t.Error("prometheus trigger: at zero pods there is no series; ignoreNullValues must be true")
			}
		}
	}
	if !push || !prom {
		t.Errorf("ScaledObject triggers: external-push %v, prometheus %v; want both", push, prom)
	}
}

func checkResources(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	r := c.Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := r.Requests[name]; !ok || q.IsZero() {
			t.Errorf("%s: no %s request", where, name)
		}
	}
	if q, ok := r.Limits[corev1.ResourceMemory]; !ok || q.Cmp(r.Requests[corev1.ResourceMemory]) < 0 {
		t.Errorf("%s: no memory limit at or above the request", where)
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
