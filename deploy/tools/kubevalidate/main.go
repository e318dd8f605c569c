// Command kubevalidate checks rendered Kubernetes manifests offline, as strictly as the API server would take them.
//
//	helm template gk deploy/helm/gatekeeper --kube-version 1.31.0 | kubevalidate
//
// It reads multi-document YAML on stdin and checks every document:
//
//   - built-in kinds (client-go's scheme) and the prometheus-operator's monitoring.coreos.com/v1 kinds are decoded
//     into their Go types strictly: an unknown or misspelt field, a duplicate field or a value of the wrong type is
//     an error naming the field (the API server's fieldValidation=Strict);
//   - KEDA's ScaledObject and TriggerAuthentication (keda.sh/v1alpha1) are checked against KEDA's own CRDs, embedded
//     (crds/): unknown fields (the server would prune them), the OpenAPI schema (types, enums, required fields) and
//     the CRD's CEL rules, with the apiextensions-apiserver's code; a kafka trigger's metadata keys are checked
//     against the names KEDA's kafka scaler reads;
//   - any other apiVersion/kind is an error (nothing is waved through unchecked);
//   - metadata as the API server validates it (name, labels, annotations), a workload's selector against its pod
//     template's labels, and in pod templates the references the server checks (volume mounts to volumes, named
//     probe ports to container ports, unique container and port names, env var names, secret/configMap key refs);
//   - across the documents (-refs, on by default): a Service's selector, a PodDisruptionBudget's, a ServiceMonitor's
//     and a ScaledObject's target find what they name in the same stream, and named ports exist where they point.
//
// Exit status: 0 every document is valid; 1 some document is not (each problem on stderr, one per line:
// "document N (Source: FILE) Kind/name: field: problem"); 2 the input cannot be read at all.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// document is one YAML document of the stream and what was learnt about it.
type document struct {
	index  int    // 1-based position in the stream
	source string // helm's "# Source: chart/templates/x.yaml" comment, if any
	raw    []byte
	gvk    schema.GroupVersionKind
	name   string
	ns     string
	typed  runtime.Object         // the decoded object (built-in and monitoring kinds)
	object map[string]interface{} // the decoded object (CRD kinds)
}

func (d *document) String() string {
	where := fmt.Sprintf("document %d", d.index)
	if d.source != "" {
		where += fmt.Sprintf(" (Source: %s)", d.source)
	}
	if d.gvk.Kind != "" {
		what := d.gvk.Kind
		if d.name != "" {
			what += "/" + d.name
		}
		where += " " + what
	}
	return where
}

// problems collects what is wrong, each tied to its document.
type problems struct {
	lines []string
}

func (p *problems) add(d *document, format string, args ...interface{}) {
	p.lines = append(p.lines, fmt.Sprintf("%s: %s", d, fmt.Sprintf(format, args...)))
}

var sourceComment = regexp.MustCompile(`(?m)^# Source: (.+)$`)

func main() {
	quiet := flag.Bool("q", false, "print nothing when every document is valid")
	refs := flag.Bool("refs", true, "check references between the documents (selectors, named ports, scale targets)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: kubevalidate [-q] [-refs=false] < manifests.yaml\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr, *quiet, *refs))
}

func run(in io.Reader, stdout, stderr io.Writer, quiet, refs bool) int {
	crds, err := loadCRDs()
	if err != nil {
		fmt.Fprintf(stderr, "kubevalidate: %v\n", err)
		return 2
	}
	docs, err := split(in)
	if err != nil {
		fmt.Fprintf(stderr, "kubevalidate: reading the input: %v\n", err)
		return 2
	}
	p := &problems{}
	var valid []*document
	for _, d := range docs {
		if checkDocument(d, crds, p) {
			valid = append(valid, d)
		}
	}
	if refs {
		checkReferences(valid, p)
	}
	if len(docs) == 0 {
		p.lines = append(p.lines, "the input holds no document")
	}
	if len(p.lines) > 0 {
		for _, line := range p.lines {
			fmt.Fprintf(stderr, "kubevalidate: %s\n", line)
		}
		fmt.Fprintf(stderr, "kubevalidate: %d problem(s) in %d document(s)\n", len(p.lines), len(docs))
		return 1
	}
	if !quiet {
		kinds := map[string]int{}
		for _, d := range docs {
			kinds[d.gvk.Kind]++
		}
		names := make([]string, 0, len(kinds))
		for k, n := range kinds {
			names = append(names, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(names)
		fmt.Fprintf(stdout, "kubevalidate: %d documents valid (%s)\n", len(docs), strings.Join(names, ", "))
	}
	return 0
}

// split cuts the stream into its documents, leaving out those with nothing but comments in them.
func split(in io.Reader) ([]*document, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(in))
	var docs []*document
	position := 0
	for {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		position++
		d := &document{index: position, raw: raw}
		if m := sourceComment.FindSubmatch(raw); m != nil {
			d.source = string(bytes.TrimSpace(m[1]))
		}
		if isBlank(raw) {
			continue
		}
		docs = append(docs, d)
	}
}

func isBlank(raw []byte) bool {
	for _, line := range strings.Split(string(raw), "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") && t != "---" {
			return false
		}
	}
	return true
}

// checkDocument decodes one document and checks it on its own. False when it could not be decoded at all.
func checkDocument(d *document, crds map[schema.GroupVersionKind]*crdVersion, p *problems) bool {
	var head struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := sigsyaml.Unmarshal(d.raw, &head); err != nil {
		p.add(d, "not a YAML object: %v", err)
		return false
	}
	d.name, d.ns = head.Metadata.Name, head.Metadata.Namespace
	if head.APIVersion == "" || head.Kind == "" {
		p.add(d, "apiVersion and kind are required (apiVersion %q, kind %q)", head.APIVersion, head.Kind)
		return false
	}
	gv, err := schema.ParseGroupVersion(head.APIVersion)
	if err != nil {
		p.add(d, "apiVersion: %v", err)
		return false
	}
	d.gvk = gv.WithKind(head.Kind)
	switch {
	case typedScheme.Recognizes(d.gvk):
		return checkTyped(d, p)
	case crds[d.gvk] != nil:
		return checkCustom(d, crds[d.gvk], p)
	default:
		p.add(d, "unknown kind %s in apiVersion %s (kubevalidate knows the built-in kinds, monitoring.coreos.com/v1 "+
			"and keda.sh/v1alpha1 %s)", d.gvk.Kind, head.APIVersion, strings.Join(crdKinds(crds), ", "))
		return false
	}
}
