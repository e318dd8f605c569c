package main

import (
	"fmt"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
)

// typedScheme holds every built-in kind (client-go's scheme) and the prometheus-operator's monitoring.coreos.com/v1.
var typedScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientscheme.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strictYAML decodes YAML into the registered Go types, failing on unknown and duplicate fields (as the API server
// does with fieldValidation=Strict) and on values of the wrong type.
var strictYAML = serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, typedScheme, typedScheme,
	serializerjson.SerializerOptions{Yaml: true, Strict: true})

func checkTyped(d *document, p *problems) bool {
	obj, _, err := strictYAML.Decode(d.raw, nil, nil)
	if err != nil {
		if runtime.IsStrictDecodingError(err) {
			for _, e := range err.(interface{ Errors() []error }).Errors() {
				p.add(d, "%v", e)
			}
		} else {
			p.add(d, "%v", err)
		}
		if obj == nil || !runtime.IsStrictDecodingError(err) {
			return false
		}
	}
	d.typed = obj
	if m, ok := objectMeta(obj); ok {
		nameFn := apivalidation.NameIsDNSSubdomain
		if _, isService := obj.(*corev1.Service); isService {
			nameFn = apivalidation.NameIsDNS1035Label
		}
		checkMeta(d, m, nameFn, p)
	}
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		checkWorkload(d, o.Spec.Selector, &o.Spec.Template, p)
		if o.Spec.ServiceName != "" {
			for _, msg := range apivalidation.NameIsDNS1035Label(o.Spec.ServiceName, false) {
				p.add(d, "spec.serviceName: %s", msg)
			}
		}
	case *appsv1.Deployment:
		checkWorkload(d, o.Spec.Selector, &o.Spec.Template, p)
	case *appsv1.DaemonSet:
		checkWorkload(d, o.Spec.Selector, &o.Spec.Template, p)
	case *appsv1.ReplicaSet:
		checkWorkload(d, o.Spec.Selector, &o.Spec.Template, p)
	case *batchv1.Job:
		checkPodSpec(d, "spec.template.spec", &o.Spec.Template.Spec, p)
	case *batchv1.CronJob:
		checkPodSpec(d, "spec.jobTemplate.spec.template.spec", &o.Spec.JobTemplate.Spec.Template.Spec, p)
	case *corev1.Pod:
		checkPodSpec(d, "spec", &o.Spec, p)
	case *policyv1.PodDisruptionBudget:
		checkSelector(d, "spec.selector", o.Spec.Selector, p)
		if o.Spec.MinAvailable != nil && o.Spec.MaxUnavailable != nil {
			p.add(d, "spec: minAvailable and maxUnavailable cannot both be set")
		}
	case *corev1.Service:
		checkService(d, o, p)
	case *corev1.ConfigMap:
		for k := range o.Data {
			for _, msg := range utilvalidation.IsConfigMapKey(k) {
				p.add(d, "data[%s]: %s", k, msg)
			}
		}
	case *monitoringv1.ServiceMonitor:
		checkServiceMonitor(d, o, p)
	case *monitoringv1.PrometheusRule:
		checkPrometheusRule(d, o, p)
	}
	return true
}

func objectMeta(obj runtime.Object) (metav1.Object, bool) {
	m, ok := obj.(metav1.Object)
	return m, ok
}

// checkMeta validates metadata as the API server does (name, namespace, labels, annotations, their sizes).
func checkMeta(d *document, m metav1.Object, nameFn apivalidation.ValidateNameFunc, p *problems) {
	for _, e := range apivalidation.ValidateObjectMetaAccessor(m, m.GetNamespace() != "", nameFn, field.NewPath("metadata")) {
		p.add(d, "%v", e)
	}
}

func checkSelector(d *document, path string, sel *metav1.LabelSelector, p *problems) labels.Selector {
	if sel == nil {
		p.add(d, "%s: Required value", path)
		return nil
	}
	for _, e := range metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, field.NewPath(path)) {
		p.add(d, "%v", e)
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		p.add(d, "%s: %v", path, err)
		return nil
	}
	if s.Empty() {
		p.add(d, "%s: an empty selector selects everything", path)
	}
	return s
}

// checkWorkload: the selector must select the pod template (the API server refuses the workload otherwise).
func checkWorkload(d *document, sel *metav1.LabelSelector, tpl *corev1.PodTemplateSpec, p *problems) {
	if s := checkSelector(d, "spec.selector", sel, p); s != nil && !s.Matches(labels.Set(tpl.Labels)) {
		p.add(d, "spec.template.metadata.labels: %v does not match spec.selector %q", tpl.Labels, s.String())
	}
	for _, e := range metav1validation.ValidateLabels(tpl.Labels, field.NewPath("spec.template.metadata.labels")) {
		p.add(d, "%v", e)
	}
	for _, e := range apivalidation.ValidateAnnotations(tpl.Annotations, field.NewPath("spec.template.metadata.annotations")) {
		p.add(d, "%v", e)
	}
	checkPodSpec(d, "spec.template.spec", &tpl.Spec, p)
}

// checkPodSpec checks the references inside a pod spec that the API server validates and a decoder cannot see.
func checkPodSpec(d *document, path string, spec *corev1.PodSpec, p *problems) {
	volumes := map[string]bool{}
	for i, v := range spec.Volumes {
		vp := fmt.Sprintf("%s.volumes[%d]", path, i)
		for _, msg := range utilvalidation.IsDNS1123Label(v.Name) {
			p.add(d, "%s.name: %q: %s", vp, v.Name, msg)
		}
		if volumes[v.Name] {
			p.add(d, "%s.name: %q: Duplicate value", vp, v.Name)
		}
		volumes[v.Name] = true
		var items []corev1.KeyToPath
		switch {
		case v.Secret != nil:
			if v.Secret.SecretName == "" {
				p.add(d, "%s.secret.secretName: Required value", vp)
			}
			items = v.Secret.Items
		case v.ConfigMap != nil:
			if v.ConfigMap.Name == "" {
				p.add(d, "%s.configMap.name: Required value", vp)
			}
			items = v.ConfigMap.Items
		}
		for j, it := range items {
			if it.Key == "" || it.Path == "" {
				p.add(d, "%s items[%d]: key and path are required", vp, j)
			}
			if strings.HasPrefix(it.Path, "/") || strings.Contains(it.Path, "..") {
				p.add(d, "%s items[%d].path: %q must be relative and must not contain '..'", vp, j, it.Path)
			}
		}
	}
	names := map[string]bool{}
	all := []struct {
		kind string
		list []corev1.Container
	}{{"initContainers", spec.InitContainers}, {"containers", spec.Containers}}
	if len(spec.Containers) == 0 {
		p.add(d, "%s.containers: Required value", path)
	}
	for _, group := range all {
		for i := range group.list {
			c := &group.list[i]
			cp := fmt.Sprintf("%s.%s[%d]", path, group.kind, i)
			for _, msg := range utilvalidation.IsDNS1123Label(c.Name) {
				p.add(d, "%s.name: %q: %s", cp, c.Name, msg)
			}
			if names[c.Name] {
				p.add(d, "%s.name: %q: Duplicate value", cp, c.Name)
			}
			names[c.Name] = true
			if c.Image == "" {
				p.add(d, "%s.image: Required value", cp)
			}
			checkContainer(d, cp, c, volumes, p)
		}
	}
}

func checkContainer(d *document, cp string, c *corev1.Container, volumes map[string]bool, p *problems) {
	ports := map[string]int32{}
	numbers := map[int32]bool{}
	for i, port := range c.Ports {
		pp := fmt.Sprintf("%s.ports[%d]", cp, i)
		if port.ContainerPort < 1 || port.ContainerPort > 65535 {
			p.add(d, "%s.containerPort: %d must be between 1 and 65535", pp, port.ContainerPort)
		}
		numbers[port.ContainerPort] = true
		if port.Name != "" {
			for _, msg := range utilvalidation.IsValidPortName(port.Name) {
				p.add(d, "%s.name: %q: %s", pp, port.Name, msg)
			}
			if _, dup := ports[port.Name]; dup {
				p.add(d, "%s.name: %q: Duplicate value", pp, port.Name)
			}
			ports[port.Name] = port.ContainerPort
		}
	}
	for i, m := range c.VolumeMounts {
		if !volumes[m.Name] {
			p.add(d, "%s.volumeMounts[%d].name: %q: Not found in the pod's volumes", cp, i, m.Name)
		}
		if !strings.HasPrefix(m.MountPath, "/") {
			p.add(d, "%s.volumeMounts[%d].mountPath: %q must be absolute", cp, i, m.MountPath)
		}
	}
	for i, e := range c.Env {
		ep := fmt.Sprintf("%s.env[%d]", cp, i)
		for _, msg := range utilvalidation.IsEnvVarName(e.Name) {
			p.add(d, "%s.name: %q: %s", ep, e.Name, msg)
		}
		if e.ValueFrom != nil {
			if e.Value != "" {
				p.add(d, "%s: value and valueFrom cannot both be set", ep)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil && (r.Name == "" || r.Key == "") {
				p.add(d, "%s.valueFrom.secretKeyRef: name and key are required", ep)
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil && (r.Name == "" || r.Key == "") {
				p.add(d, "%s.valueFrom.configMapKeyRef: name and key are required", ep)
			}
			if r := e.ValueFrom.FieldRef; r != nil && r.FieldPath == "" {
				p.add(d, "%s.valueFrom.fieldRef.fieldPath: Required value", ep)
			}
		}
	}
	for _, probe := range []struct {
		name string
		p    *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if probe.p == nil {
			continue
		}
		var port *intstr.IntOrString
		switch {
		case probe.p.HTTPGet != nil:
			port = &probe.p.HTTPGet.Port
			if !strings.HasPrefix(probe.p.HTTPGet.Path, "/") {
				p.add(d, "%s.%s.httpGet.path: %q must start with /", cp, probe.name, probe.p.HTTPGet.Path)
			}
		case probe.p.TCPSocket != nil:
			port = &probe.p.TCPSocket.Port
		}
		if port == nil {
			continue
		}
		if port.Type == intstr.String {
			if _, ok := ports[port.StrVal]; !ok {
				p.add(d, "%s.%s: port %q is not a named port of the container", cp, probe.name, port.StrVal)
			}
		} else if port.IntVal < 1 || port.IntVal > 65535 {
			p.add(d, "%s.%s: port %d must be between 1 and 65535", cp, probe.name, port.IntVal)
		}
		if (probe.name == "livenessProbe" || probe.name == "startupProbe") && probe.p.SuccessThreshold > 1 {
			p.add(d, "%s.%s.successThreshold: must be 1", cp, probe.name)
		}
	}
}

func checkService(d *document, s *corev1.Service, p *problems) {
	names := map[string]bool{}
	for i, port := range s.Spec.Ports {
		pp := fmt.Sprintf("spec.ports[%d]", i)
		if len(s.Spec.Ports) > 1 && port.Name == "" {
			p.add(d, "%s.name: Required value (a Service with several ports names each)", pp)
		}
		if port.Name != "" {
			for _, msg := range utilvalidation.IsDNS1035Label(port.Name) {
				p.add(d, "%s.name: %q: %s", pp, port.Name, msg)
			}
			if names[port.Name] {
				p.add(d, "%s.name: %q: Duplicate value", pp, port.Name)
			}
			names[port.Name] = true
		}
		if port.Port < 1 || port.Port > 65535 {
			p.add(d, "%s.port: %d must be between 1 and 65535", pp, port.Port)
		}
		if port.TargetPort.Type == intstr.String {
			for _, msg := range utilvalidation.IsValidPortName(port.TargetPort.StrVal) {
				p.add(d, "%s.targetPort: %q: %s", pp, port.TargetPort.StrVal, msg)
			}
		}
	}
	for _, e := range metav1validation.ValidateLabels(s.Spec.Selector, field.NewPath("spec.selector")) {
		p.add(d, "%v", e)
	}
}

// The pattern of monitoring.coreos.com's Duration (its CRDs' OpenAPI pattern).
var promDuration = regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)

func checkDuration(d *document, path string, v *monitoringv1.Duration, p *problems) {
	if v != nil && *v != "" && !promDuration.MatchString(string(*v)) {
		p.add(d, "%s: %q is not a Prometheus duration", path, *v)
	}
}

func checkServiceMonitor(d *document, sm *monitoringv1.ServiceMonitor, p *problems) {
	checkSelector(d, "spec.selector", &sm.Spec.Selector, p)
	if len(sm.Spec.Endpoints) == 0 {
		p.add(d, "spec.endpoints: at least one endpoint is needed")
	}
	for i, ep := range sm.Spec.Endpoints {
		path := fmt.Sprintf("spec.endpoints[%d]", i)
		if ep.Port == "" && ep.TargetPort == nil {
			p.add(d, "%s: port or targetPort is required", path)
		}
		checkDuration(d, path+".interval", &ep.Interval, p)
		checkDuration(d, path+".scrapeTimeout", &ep.ScrapeTimeout, p)
		if ep.Scheme != nil && *ep.Scheme != "" {
			if s := strings.ToLower(ep.Scheme.String()); s != "http" && s != "https" {
				p.add(d, "%s.scheme: %q must be http or https", path, *ep.Scheme)
			}
		}
	}
}

func checkPrometheusRule(d *document, pr *monitoringv1.PrometheusRule, p *problems) {
	groups := map[string]bool{}
	if len(pr.Spec.Groups) == 0 {
		p.add(d, "spec.groups: no rule group")
	}
	for i, g := range pr.Spec.Groups {
		gp := fmt.Sprintf("spec.groups[%d]", i)
		if g.Name == "" {
			p.add(d, "%s.name: Required value", gp)
		}
		if groups[g.Name] {
			p.add(d, "%s.name: %q: Duplicate value", gp, g.Name)
		}
		groups[g.Name] = true
		checkDuration(d, gp+".interval", g.Interval, p)
		if len(g.Rules) == 0 {
			p.add(d, "%s.rules: the group has no rule", gp)
		}
		for j, r := range g.Rules {
			rp := fmt.Sprintf("%s.rules[%d]", gp, j)
			if (r.Alert == "") == (r.Record == "") {
				p.add(d, "%s: exactly one of alert and record is required", rp)
			}
			if r.Expr.String() == "" {
				p.add(d, "%s.expr: Required value", rp)
			}
			checkDuration(d, rp+".for", r.For, p)
			checkDuration(d, rp+".keep_firing_for", (*monitoringv1.Duration)(r.KeepFiringFor), p)
			if r.Record != "" && (r.For != nil || len(r.Annotations) > 0) {
				p.add(d, "%s: a recording rule takes no for or annotations", rp)
			}
		}
	}
}
