package main

import (
	"fmt"
	"sort"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// workload is a pod template found in the stream, with what names it.
type workload struct {
	doc      *document
	kind     string
	template *corev1.PodTemplateSpec
}

// checkReferences checks what one document names in another: a chart whose Service selects no pod, whose
// ServiceMonitor names a port the Service does not have, or whose autoscaler targets a workload of another name
// renders and applies without a word, and then does nothing.
func checkReferences(docs []*document, p *problems) {
	var workloads []workload
	services := map[string]*corev1.Service{}
	configMaps := map[string]*corev1.ConfigMap{}
	triggerAuths := map[string]bool{}
	for _, d := range docs {
		switch o := d.typed.(type) {
		case *appsv1.StatefulSet:
			workloads = append(workloads, workload{d, "StatefulSet", &o.Spec.Template})
		case *appsv1.Deployment:
			workloads = append(workloads, workload{d, "Deployment", &o.Spec.Template})
		case *appsv1.DaemonSet:
			workloads = append(workloads, workload{d, "DaemonSet", &o.Spec.Template})
		case *corev1.Service:
			services[key(d.ns, o.Name)] = o
		case *corev1.ConfigMap:
			configMaps[key(d.ns, o.Name)] = o
		}
		if d.object != nil && d.gvk.Kind == "TriggerAuthentication" {
			triggerAuths[key(d.ns, d.name)] = true
		}
	}
	selects := func(ns string, sel labels.Selector) []workload {
		var out []workload
		for _, w := range workloads {
			if w.doc.ns == ns && sel.Matches(labels.Set(w.template.Labels)) {
				out = append(out, w)
			}
		}
		return out
	}
	for _, w := range workloads {
		checkConfigMapVolumes(w, configMaps, p)
	}
	for _, d := range docs {
		switch o := d.typed.(type) {
		case *appsv1.StatefulSet:
			svc := services[key(d.ns, o.Spec.ServiceName)]
			switch {
			case o.Spec.ServiceName == "":
			case svc == nil:
				p.add(d, "spec.serviceName: Service %q is not in the manifests", o.Spec.ServiceName)
			case svc.Spec.ClusterIP != corev1.ClusterIPNone:
				p.add(d, "spec.serviceName: Service %q is not headless (clusterIP: None): the pods get no DNS names",
					o.Spec.ServiceName)
			}
		case *corev1.Service:
			if len(o.Spec.Selector) == 0 || o.Spec.Type == corev1.ServiceTypeExternalName {
				continue
			}
			matched := selects(d.ns, labels.SelectorFromSet(o.Spec.Selector))
			if len(matched) == 0 {
				p.add(d, "spec.selector: %v selects no pod template in the manifests", o.Spec.Selector)
				continue
			}
			for i, port := range o.Spec.Ports {
				if port.TargetPort.Type != intstr.String {
					continue
				}
				for _, w := range matched {
					if !hasContainerPort(w.template, port.TargetPort.StrVal) {
						p.add(d, "spec.ports[%d].targetPort: %q is not a container port of %s/%s", i,
							port.TargetPort.StrVal, w.kind, w.doc.name)
					}
				}
			}
		case *policyv1.PodDisruptionBudget:
			if o.Spec.Selector == nil {
				continue
			}
			if sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector); err == nil && len(selects(d.ns, sel)) == 0 {
				p.add(d, "spec.selector: %q selects no pod template in the manifests", sel.String())
			}
		case *monitoringv1.ServiceMonitor:
			checkServiceMonitorRefs(d, o, services, selects, p)
		}
		if d.object != nil && d.gvk.Kind == "ScaledObject" {
			checkScaledObjectRefs(d, workloads, triggerAuths, p)
		}
	}
}

func key(ns, name string) string { return ns + "/" + name }

func hasContainerPort(t *corev1.PodTemplateSpec, name string) bool {
	for _, c := range t.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == name {
				return true
			}
		}
	}
	return false
}

// checkConfigMapVolumes: a volume of a ConfigMap rendered alongside names only keys that ConfigMap has.
func checkConfigMapVolumes(w workload, configMaps map[string]*corev1.ConfigMap, p *problems) {
	for i, v := range w.template.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		cm := configMaps[key(w.doc.ns, v.ConfigMap.Name)]
		if cm == nil {
			continue // made elsewhere
		}
		for j, it := range v.ConfigMap.Items {
			_, inData := cm.Data[it.Key]
			_, inBinary := cm.BinaryData[it.Key]
			if !inData && !inBinary {
				p.add(w.doc, "spec.template.spec.volumes[%d].configMap.items[%d].key: ConfigMap %q has no key %q", i, j,
					cm.Name, it.Key)
			}
		}
	}
}

func checkServiceMonitorRefs(d *document, sm *monitoringv1.ServiceMonitor, services map[string]*corev1.Service,
	selects func(string, labels.Selector) []workload, p *problems) {
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		return
	}
	var matched []*corev1.Service
	names := make([]string, 0, len(services))
	for k := range services {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		svc := services[k]
		if svc.Namespace == d.ns && sel.Matches(labels.Set(svc.Labels)) {
			matched = append(matched, svc)
		}
	}
	if len(matched) == 0 {
		p.add(d, "spec.selector: %q selects no Service in the manifests", sel.String())
		return
	}
	// Two selected Services in front of the same pods: every pod is scraped twice (duplicate series).
	fronts := map[string]string{}
	for _, svc := range matched {
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		for _, w := range selects(d.ns, labels.SelectorFromSet(svc.Spec.Selector)) {
			k := w.kind + "/" + w.doc.name
			if other, dup := fronts[k]; dup {
				p.add(d, "spec.selector: %q selects Services %s and %s, both in front of %s: its pods would be "+
					"scraped twice", sel.String(), other, svc.Name, k)
				continue
			}
			fronts[k] = svc.Name
		}
	}
	for i, ep := range sm.Spec.Endpoints {
		if ep.Port == "" {
			continue
		}
		for _, svc := range matched {
			found := false
			for _, port := range svc.Spec.Ports {
				found = found || port.Name == ep.Port
			}
			if !found {
				p.add(d, "spec.endpoints[%d].port: %q is not a port of Service %s (the target would never be scraped)",
					i, ep.Port, svc.Name)
			}
		}
	}
}

func checkScaledObjectRefs(d *document, workloads []workload, triggerAuths map[string]bool, p *problems) {
	spec, _ := d.object["spec"].(map[string]interface{})
	ref, _ := spec["scaleTargetRef"].(map[string]interface{})
	kind, _ := ref["kind"].(string)
	if kind == "" {
		kind = "Deployment"
	}
	name, _ := ref["name"].(string)
	found := false
	for _, w := range workloads {
		found = found || (w.kind == kind && w.doc.name == name && w.doc.ns == d.ns)
	}
	if !found {
		p.add(d, "spec.scaleTargetRef: %s %q is not in the manifests", kind, name)
	}
	triggers, _ := spec["triggers"].([]interface{})
	for i, t := range triggers {
		trigger, _ := t.(map[string]interface{})
		auth, _ := trigger["authenticationRef"].(map[string]interface{})
		if auth == nil {
			continue
		}
		if k, _ := auth["kind"].(string); k != "" && k != "TriggerAuthentication" {
			continue // a ClusterTriggerAuthentication, made elsewhere
		}
		if n, _ := auth["name"].(string); !triggerAuths[key(d.ns, n)] {
			p.add(d, "spec.triggers[%d].authenticationRef: TriggerAuthentication %q is not in the manifests", i,
				fmt.Sprint(auth["name"]))
		}
	}
}
