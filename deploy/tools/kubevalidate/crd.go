package main

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// The CRDs the custom kinds are checked against, copied unchanged from github.com/kedacore/keda/v2@v2.21.0
// (config/crd/bases/, Apache-2.0). deploy/tools/install.sh rebuilds this program when a .go file changes, not when a
// YAML file does, so each file's SHA-256 is pinned here: a changed CRD must come with its new sum (the program
// refuses to run otherwise), and the rebuild follows.
//
//go:embed crds/*.yaml
var crdFiles embed.FS

var crdSums = map[string]string{
	"crds/keda.sh_scaledobjects.yaml":          "af35555862a83933b074af14ad439c4b4ceabaf4daa3e9338e9b23e36d308d80",
	"crds/keda.sh_triggerauthentications.yaml": "ed59ab37b2fa9a18119484a3dbd849b0b18ed25e1aea91d9f1305d4da2215bd8",
}

// crdVersion is one served version of a CRD, ready to validate objects with.
type crdVersion struct {
	gvk        schema.GroupVersionKind
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
	cel        *cel.Validator
	namespaced bool
}

func loadCRDs() (map[schema.GroupVersionKind]*crdVersion, error) {
	entries, err := crdFiles.ReadDir("crds")
	if err != nil {
		return nil, err
	}
	out := map[schema.GroupVersionKind]*crdVersion{}
	for _, e := range entries {
		name := "crds/" + e.Name()
		raw, err := crdFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(raw)
		if want, ok := crdSums[name]; !ok || want != hex.EncodeToString(sum[:]) {
			return nil, fmt.Errorf("%s: its SHA-256 is %s, crd.go pins %q: update crdSums with the file",
				name, hex.EncodeToString(sum[:]), want)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := sigsyaml.UnmarshalStrict(raw, &crd); err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		var internal apiextensions.CustomResourceDefinition
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&crd, &internal, nil); err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		for _, v := range internal.Spec.Versions {
			if !v.Served {
				continue
			}
			versionSchema, err := apiextensions.GetSchemaForVersion(&internal, v.Name)
			if err != nil || versionSchema == nil || versionSchema.OpenAPIV3Schema == nil {
				return nil, fmt.Errorf("%s %s: no schema (%v)", name, v.Name, err)
			}
			s := versionSchema.OpenAPIV3Schema
			ss, err := structuralschema.NewStructural(s)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %v", name, v.Name, err)
			}
			validator, _, err := validation.NewSchemaValidator(s)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %v", name, v.Name, err)
			}
			gvk := schema.GroupVersionKind{Group: internal.Spec.Group, Version: v.Name, Kind: internal.Spec.Names.Kind}
			out[gvk] = &crdVersion{
				gvk:        gvk,
				structural: ss,
				validator:  validator,
				cel:        cel.NewValidator(ss, true, celconfig.PerCallLimit),
				namespaced: internal.Spec.Scope == apiextensions.NamespaceScoped,
			}
		}
	}
	return out, nil
}

func crdKinds(crds map[schema.GroupVersionKind]*crdVersion) []string {
	var kinds []string
	for gvk := range crds {
		kinds = append(kinds, gvk.Kind)
	}
	sort.Strings(kinds)
	return kinds
}

// checkCustom checks a custom resource the way the API server would on create: unknown fields (pruned by the
// server; an error under fieldValidation=Strict), metadata, the OpenAPI schema and the CEL rules.
func checkCustom(d *document, crd *crdVersion, p *problems) bool {
	js, err := sigsyaml.YAMLToJSONStrict(d.raw)
	if err != nil {
		p.add(d, "%v", err)
		return false
	}
	var obj map[string]interface{}
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		p.add(d, "%v", err)
		return false
	}
	d.object = obj

	// metadata: strictly as ObjectMeta, then as the server validates it
	var meta metav1.ObjectMeta
	if raw, ok := obj["metadata"]; ok {
		mj, _ := utiljson.Marshal(raw)
		strictErrs, err := kjson.UnmarshalStrict(mj, &meta)
		if err != nil {
			p.add(d, "metadata: %v", err)
		}
		for _, e := range strictErrs {
			p.add(d, "metadata: %v", e)
		}
	}
	checkMeta(d, &meta, apivalidation.NameIsDNSSubdomain, p)

	// unknown fields: what the server would prune (on a copy: the validation below sees the object as written)
	copied := deepCopyJSON(obj)
	for _, path := range pruning.PruneWithOptions(copied, crd.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		p.add(d, "unknown field %q", path)
	}
	for _, e := range validation.ValidateCustomResource(nil, obj, crd.validator) {
		p.add(d, "%v", e)
	}
	if crd.cel != nil {
		errs, _ := crd.cel.Validate(context.Background(), nil, crd.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		for _, e := range errs {
			p.add(d, "%v", e)
		}
	}
	if crd.gvk.Group == "keda.sh" && crd.gvk.Kind == "ScaledObject" {
		checkKedaTriggers(d, obj, p)
	}
	return true
}

func deepCopyJSON(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, x := range t {
			out[k] = deepCopyJSON(x)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, x := range t {
			out[i] = deepCopyJSON(x)
		}
		return out
	default:
		return v
	}
}

// The trigger metadata keys KEDA's kafka scaler reads (pkg/scalers/kafka_scaler.go, kafkaMetadata's "keda" tags
// with order triggerMetadata, at v2.21.0), and the <name>FromEnv form of those it also resolves from the target's
// environment. KEDA ignores a key it does not read, so a misspelt one (lagTreshold) would silently use a default.
var kafkaTriggerKeys = map[string]bool{
	"bootstrapServers": true, "consumerGroup": true, "topic": true, "partitionLimitation": true,
	"lagThreshold": true, "activationLagThreshold": true, "offsetResetPolicy": true, "allowIdleConsumers": true,
	"excludePersistentLag": true, "scaleToZeroOnInvalidOffset": true, "limitToPartitionsWithLag": true,
	"ensureEvenDistributionOfPartitions": true, "fullMetadata": true, "version": true, "tls": true,
	"unsafeSsl": true, "sasl": true, "saslTokenProvider": true, "awsRegion": true,
	"bootstrapServersFromEnv": true, "consumerGroupFromEnv": true, "topicFromEnv": true,
}

var kafkaTriggerEnums = map[string][]string{
	"offsetResetPolicy": {"latest", "earliest"},
	"tls":               {"enable", "disable"},
	"sasl":              {"none", "plaintext", "scram_sha256", "scram_sha512", "oauthbearer", "gssapi"},
	"saslTokenProvider": {"bearer", "aws_msk_iam"},
}

func checkKedaTriggers(d *document, obj map[string]interface{}, p *problems) {
	spec, _ := obj["spec"].(map[string]interface{})
	triggers, _ := spec["triggers"].([]interface{})
	for i, t := range triggers {
		trigger, _ := t.(map[string]interface{})
		if trigger["type"] != "kafka" {
			continue
		}
		md, _ := trigger["metadata"].(map[string]interface{})
		for k, v := range md {
			path := fmt.Sprintf("spec.triggers[%d].metadata.%s", i, k)
			if !kafkaTriggerKeys[k] {
				p.add(d, "%s: KEDA's kafka scaler reads no such key", path)
				continue
			}
			if allowed, ok := kafkaTriggerEnums[k]; ok {
				s, _ := v.(string)
				if !contains(allowed, s) {
					p.add(d, "%s: %q is not one of %s", path, s, strings.Join(allowed, ", "))
				}
			}
		}
		_, hasServers := md["bootstrapServers"]
		_, hasServersEnv := md["bootstrapServersFromEnv"]
		_, hasGroup := md["consumerGroup"]
		_, hasGroupEnv := md["consumerGroupFromEnv"]
		if !hasServers && !hasServersEnv {
			p.add(d, "spec.triggers[%d].metadata.bootstrapServers: Required value", i)
		}
		if !hasGroup && !hasGroupEnv {
			p.add(d, "spec.triggers[%d].metadata.consumerGroup: Required value", i)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
