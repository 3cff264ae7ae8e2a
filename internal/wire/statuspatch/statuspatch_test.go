package statuspatch

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Hour))
)

func running(name string, since metav1.Time, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}}}
}

// referenceStatusPatch is the generic way Build must agree with: encode both
// statuses in a pod and let the strategic-merge library diff them.
func referenceStatusPatch(uid types.UID, current, desired *corev1.PodStatus) ([]byte, error) {
	if equality.Semantic.DeepEqual(current, desired) {
		return nil, nil
	}
	oldJSON, err := json.Marshal(corev1.Pod{Status: *current})
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(corev1.Pod{Status: *desired})
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	m["metadata"] = map[string]any{"uid": uid}
	return json.Marshal(m)
}

const patchUID = types.UID("6d3f7a0e-uid")

// applied is the status of a pod holding onServer once the API server has applied
// patch (nil: no write) to it.
func applied(t testing.TB, onServer corev1.PodStatus, patch []byte) (corev1.PodStatus, error) {
	t.Helper()
	if patch == nil {
		return asStored(t, onServer), nil
	}
	podJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: patchUID}, Status: onServer})
	if err != nil {
		t.Fatal(err)
	}
	out, err := strategicpatch.StrategicMergePatch(podJSON, patch, corev1.Pod{})
	if err != nil {
		return corev1.PodStatus{}, fmt.Errorf("applying %s: %w", patch, err)
	}
	var p corev1.Pod
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	if p.UID != patchUID {
		t.Fatalf("patch %s changed the UID to %q", patch, p.UID)
	}
	return p.Status, nil
}

// asStored is s as the API server keeps it: through JSON, times to the second.
func asStored(t testing.TB, s corev1.PodStatus) corev1.PodStatus {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out corev1.PodStatus
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkPatch checks that Build turns current into desired on the server,
// exactly as the reference patch does, and writes nothing when the reference would not.
func checkPatch(t testing.TB, current, desired corev1.PodStatus) {
	t.Helper()
	patch, err := Build(patchUID, &current, &desired)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	ref, err := referenceStatusPatch(patchUID, &current, &desired)
	if err != nil {
		t.Fatalf("reference: %v", err)
	}
	if ref == nil && patch != nil && validUTF8(desired) {
		t.Fatalf("patch %s where the reference writes nothing", patch)
	}
	if patch != nil {
		if err := onceEach(patch); err != nil {
			t.Fatalf("patch %s: %v", patch, err)
		}
	}
	got, err := applied(t, current, patch)
	want, refErr := applied(t, current, ref)
	if repeatsKeys(current) || repeatsKeys(desired) {
		// The strategic merge promises nothing for a list whose keys repeat (the
		// server may refuse the reference's patch): only agreement with it.
		if (err == nil) != (refErr == nil) {
			t.Fatalf("applying the patch: %v; the reference's: %v", err, refErr)
		}
	} else {
		if err != nil || refErr != nil {
			t.Fatalf("patch: %v; reference: %v", err, refErr)
		}
		if stored := asStored(t, desired); !equality.Semantic.DeepEqual(got, stored) {
			t.Fatalf("patch %s\ngot  %s\nwant %s", patch, dump(got), dump(stored))
		}
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("patch %s\nreference %s\ngot  %s\nwant %s", patch, ref, dump(got), dump(want))
	}
}

// onceEach checks that patch is JSON whose status object names each member once:
// a field written both directly and by the generic diff would be named twice.
func onceEach(patch []byte) error {
	var p struct{ Status json.RawMessage }
	if err := json.Unmarshal(patch, &p); err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(p.Status)))
	seen := map[string]bool{}
	for depth := 0; ; {
		tok, err := dec.Token()
		if err != nil {
			return nil // the end: Unmarshal above checked the syntax
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		default:
			if name, ok := tok.(string); ok && depth == 1 && dec.More() {
				if seen[name] {
					return fmt.Errorf("%s written twice", name)
				}
				seen[name] = true
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					return err
				}
			}
		}
	}
}

func dump(s corev1.PodStatus) string { b, _ := json.Marshal(s); return string(b) }

func validUTF8(s corev1.PodStatus) bool {
	b, _ := json.Marshal(s)
	return !strings.Contains(string(b), `\ufffd`)
}

func repeatsKeys(s corev1.PodStatus) bool {
	return repeats(s.Conditions, conditionKey) || repeats(s.PodIPs, podIPKey) || repeats(s.HostIPs, hostIPKey)
}

func TestStatusPatchAgreesWithTheStrategicMergeDiff(t *testing.T) {
	g := statusGen{rand.New(rand.NewPCG(7, 11))}
	for i := range 3000 {
		current := asStored(t, g.status()) // as read from the API
		desired := g.mutate(current)
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkPatch(t, current, desired) })
		if t.Failed() {
			return
		}
	}
}

func FuzzStatusPatchAgreesWithTheStrategicMergeDiff(f *testing.F) {
	f.Add(uint64(1), "Back-off restarting", "CrashLoopBackOff")
	f.Add(uint64(2), "", "")
	f.Add(uint64(3), "quote \" \\ \n \x01 \u2028 <&>", "\xff\xfe invalid")
	f.Fuzz(func(t *testing.T, seed uint64, message, reason string) {
		g := statusGen{rand.New(rand.NewPCG(seed, seed>>32))}
		current := asStored(t, g.status())
		desired := g.mutate(current)
		desired.Message = message
		if len(desired.Conditions) > 0 {
			desired.Conditions[0].Reason = reason
		}
		checkPatch(t, current, desired)
	})
}

// The reason for a strategic merge rather than a replacement of the status: a
// condition another writer added after our read stays.
func TestAConditionAddedByOthersAfterOurReadSurvives(t *testing.T) {
	current := corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
	}}
	desired := *current.DeepCopy()
	desired.Phase = corev1.PodRunning
	desired.Conditions = append(desired.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t1})
	patch, err := Build(patchUID, &current, &desired)
	if err != nil {
		t.Fatal(err)
	}
	onServer := *current.DeepCopy()
	gate := corev1.PodCondition{Type: "example.com/gate", Status: corev1.ConditionTrue, LastTransitionTime: t1}
	onServer.Conditions = append(onServer.Conditions, gate)

	got, err := applied(t, onServer, patch)
	if err != nil {
		t.Fatal(err)
	}
	want := []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReady, gate.Type}
	var types []corev1.PodConditionType
	for _, c := range got.Conditions {
		types = append(types, c.Type)
	}
	if got.Phase != corev1.PodRunning || !slices.Equal(types, want) {
		t.Errorf("after %s: phase %s, conditions %v; want Running, %v", patch, got.Phase, types, want)
	}
}

func TestSubSecondTimesTheAPIDoesNotKeepWriteNothing(t *testing.T) {
	current := corev1.PodStatus{StartTime: &t0, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t0}},
		ContainerStatuses: []corev1.ContainerStatus{running("app", t0, 0)}}
	later := metav1.NewTime(t0.Add(400 * time.Millisecond))
	desired := corev1.PodStatus{StartTime: &later, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: later}},
		ContainerStatuses: []corev1.ContainerStatus{running("app", later, 0)}}
	if patch, err := Build(patchUID, &current, &desired); patch != nil || err != nil {
		t.Errorf("got %s, %v; want no patch", patch, err)
	}
}

// Every field of PodStatus, those added to the API after this was written too, is
// patched: set, and cleared.
func TestEveryPodStatusFieldIsPatched(t *testing.T) {
	base := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.2", StartTime: &t0,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t0}},
		ContainerStatuses: []corev1.ContainerStatus{running("app", t0, 0)}}
	st := reflect.TypeFor[corev1.PodStatus]()
	for i := range st.NumField() {
		f := st.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			with := *base.DeepCopy()
			reflect.ValueOf(&with).Elem().Field(i).Set(filled(f.Type, 6))
			without := *base.DeepCopy()
			reflect.ValueOf(&without).Elem().Field(i).SetZero()
			for _, c := range [][2]corev1.PodStatus{{without, with}, {with, without}, {base, with}} {
				current, desired := asStored(t, c[0]), c[1]
				if equality.Semantic.DeepEqual(current, asStored(t, desired)) {
					continue
				}
				if patch, _ := Build(patchUID, &current, &desired); patch == nil {
					t.Fatalf("no patch from %s to %s", dump(current), dump(desired))
				}
				checkPatch(t, current, desired)
			}
		})
	}
}

// filled is a value of type t with every field set, down to depth.
func filled(t reflect.Type, depth int) reflect.Value {
	v := reflect.New(t).Elem()
	switch t {
	case reflect.TypeFor[metav1.Time]():
		v.Set(reflect.ValueOf(t1))
		return v
	case reflect.TypeFor[resource.Quantity]():
		v.Set(reflect.ValueOf(resource.MustParse("250m")))
		return v
	}
	if depth == 0 {
		return v
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		p.Elem().Set(filled(t.Elem(), depth-1))
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(t, 1, 1)
		s.Index(0).Set(filled(t.Elem(), depth-1))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(t)
		m.SetMapIndex(filled(t.Key(), depth-1), filled(t.Elem(), depth-1))
		v.Set(m)
	case reflect.Struct:
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				v.Field(i).Set(filled(t.Field(i).Type, depth-1))
			}
		}
	}
	return v
}

// Build writes some fields itself on the strength of their patch strategy
// and of the fields of their elements: this fails when k8s.io/api changes either.
func TestTheFieldsWrittenDirectlyAreAsStatusPatchAssumes(t *testing.T) {
	strategies := map[string]string{
		"Conditions": "merge/type", "HostIPs": "merge/ip", "PodIPs": "merge/ip",
		"InitContainerStatuses": "/", "ContainerStatuses": "/", "EphemeralContainerStatuses": "/", "VolumeHealth": "/",
	}
	st := reflect.TypeFor[corev1.PodStatus]()
	for name, want := range strategies {
		f, ok := st.FieldByName(name)
		if !ok {
			t.Errorf("PodStatus has no field %s", name)
			continue
		}
		if got := f.Tag.Get("patchStrategy") + "/" + f.Tag.Get("patchMergeKey"); got != want {
			t.Errorf("PodStatus.%s patch strategy %q, Build assumes %q", name, got, want)
		}
	}
	// appendCondition and appendIP write these members and no others.
	elements := map[reflect.Type][]string{
		reflect.TypeFor[corev1.PodCondition](): {"type", "observedGeneration,omitempty", "status", "lastProbeTime,omitempty",
			"lastTransitionTime,omitempty", "reason,omitempty", "message,omitempty"},
		reflect.TypeFor[corev1.PodIP]():  {"ip"},
		reflect.TypeFor[corev1.HostIP](): {"ip"},
	}
	for typ, want := range elements {
		var got []string
		for i := range typ.NumField() {
			got = append(got, typ.Field(i).Tag.Get("json"))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s has members %q, Build writes %q", typ, got, want)
		}
	}
}

func TestAppendJSONStringDecodesAsEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", `"\`, "\n\r\t\b\f\x00\x1f\x7f", "<&>", "ü ✓ 𝄞", "\u2028\u2029", "\xff", "a\xc3", "\xed\xa0\x80"} {
		var got, want string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil {
			t.Errorf("%q: %v", s, err)
			continue
		}
		b, _ := json.Marshal(s)
		_ = json.Unmarshal(b, &want)
		if got != want || !utf8.ValidString(got) {
			t.Errorf("%q decodes to %q, want %q", s, got, want)
		}
	}
}
