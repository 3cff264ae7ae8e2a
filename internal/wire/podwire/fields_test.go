package podwire

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// wireField is where a field number the codec reads comes from: the Go field
// of k8s.io/api or apimachinery whose protobuf tag declares it, and the wire
// type the codec reads it as.
type wireField struct {
	num   protowire.Number
	in    reflect.Type
	field string
	wire  string // "bytes" (strings, bytes, messages, repeated messages) or "varint"
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// wireFields is every constant of fields.go, by name.
var wireFields = map[string]wireField{
	"podMetadataField": {podMetadataField, typeOf[corev1.Pod](), "ObjectMeta", "bytes"},
	"podSpecField":     {podSpecField, typeOf[corev1.Pod](), "Spec", "bytes"},
	"podStatusField":   {podStatusField, typeOf[corev1.Pod](), "Status", "bytes"},

	"listMetadataField": {listMetadataField, typeOf[corev1.PodList](), "ListMeta", "bytes"},
	"listItemsField":    {listItemsField, typeOf[corev1.PodList](), "Items", "bytes"},

	"metaGenerationField":    {metaGenerationField, typeOf[metav1.ObjectMeta](), "Generation", "varint"},
	"metaLabelsField":        {metaLabelsField, typeOf[metav1.ObjectMeta](), "Labels", "bytes"},
	"metaAnnotationsField":   {metaAnnotationsField, typeOf[metav1.ObjectMeta](), "Annotations", "bytes"},
	"metaOwnerRefsField":     {metaOwnerRefsField, typeOf[metav1.ObjectMeta](), "OwnerReferences", "bytes"},
	"metaFinalizersField":    {metaFinalizersField, typeOf[metav1.ObjectMeta](), "Finalizers", "bytes"},
	"metaManagedFieldsField": {metaManagedFieldsField, typeOf[metav1.ObjectMeta](), "ManagedFields", "bytes"},

	"specContainersField":     {specContainersField, typeOf[corev1.PodSpec](), "Containers", "bytes"},
	"specActiveDeadlineField": {specActiveDeadlineField, typeOf[corev1.PodSpec](), "ActiveDeadlineSeconds", "varint"},
	"specNodeNameField":       {specNodeNameField, typeOf[corev1.PodSpec](), "NodeName", "bytes"},
	"specInitContainersField": {specInitContainersField, typeOf[corev1.PodSpec](), "InitContainers", "bytes"},
	"specReadinessGatesField": {specReadinessGatesField, typeOf[corev1.PodSpec](), "ReadinessGates", "bytes"},
	"specEphemeralField":      {specEphemeralField, typeOf[corev1.PodSpec](), "EphemeralContainers", "bytes"},
	"specResourcesField":      {specResourcesField, typeOf[corev1.PodSpec](), "Resources", "bytes"},

	"containerNameField":          {containerNameField, typeOf[corev1.Container](), "Name", "bytes"},
	"containerResourcesField":     {containerResourcesField, typeOf[corev1.Container](), "Resources", "bytes"},
	"containerRestartPolicyField": {containerRestartPolicyField, typeOf[corev1.Container](), "RestartPolicy", "bytes"},

	"statusPhaseField": {statusPhaseField, typeOf[corev1.PodStatus](), "Phase", "bytes"},

	"watchEventTypeField":   {watchEventTypeField, typeOf[metav1.WatchEvent](), "Type", "bytes"},
	"watchEventObjectField": {watchEventObjectField, typeOf[metav1.WatchEvent](), "Object", "bytes"},
	"rawExtensionRawField":  {rawExtensionRawField, typeOf[runtime.RawExtension](), "Raw", "bytes"},
}

// Each field number the codec reads is the one the API's Go types declare in
// their protobuf tags, of the wire type the codec reads: a Kubernetes upgrade
// that moved or retyped a field fails here, not in a node reading another
// field. Every constant of fields.go must be checked.
func TestEachFieldNumberIsTheAPIs(t *testing.T) {
	for _, name := range constantsOf(t, "fields.go") {
		if _, ok := wireFields[name]; !ok {
			t.Errorf("%s (fields.go) is not checked: add it to wireFields", name)
		}
	}
	for name, f := range wireFields {
		sf, ok := ownField(f.in, f.field)
		if !ok {
			t.Errorf("%s: %s has no field %s", name, f.in, f.field)
			continue
		}
		tag := strings.Split(sf.Tag.Get("protobuf"), ",")
		if len(tag) < 2 {
			t.Errorf("%s: %s.%s has no protobuf tag", name, f.in, f.field)
			continue
		}
		num, err := strconv.Atoi(tag[1])
		if err != nil {
			t.Errorf("%s: %s.%s has protobuf tag %q", name, f.in, f.field, sf.Tag.Get("protobuf"))
			continue
		}
		if protowire.Number(num) != f.num || tag[0] != f.wire {
			t.Errorf("%s is field %d (%s), but %s.%s is field %d (%s) in k8s.io/api", name, f.num, f.wire, f.in, f.field, num, tag[0])
		}
	}
}

// ownField is the field of t named name, declared in t itself (embedded
// structs are fields of their own, not searched).
func ownField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Name == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// constantsOf is the names of the constants declared in file, of this package.
func constantsOf(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					names = append(names, n.Name)
				}
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("no constants in %s", file)
	}
	return names
}
