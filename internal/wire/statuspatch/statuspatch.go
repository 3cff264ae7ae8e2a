package statuspatch

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// Build returns the strategic-merge patch that turns current into desired for
// the pod with the given UID, or nil when there is nothing to write. The patch
// carries metadata.uid, so the API server refuses it if the pod was replaced by
// another with the same name in the meantime.
//
// The patch is the one strategicpatch.CreateTwoWayMergePatch would make, in meaning
// if not byte for byte, written straight from the two structs: the generic diff
// encoded and decoded both pods and cost 15 % of a loaded node's CPU. Scalars are
// set, or cleared with null; lists the API merges by key get their new and changed
// elements, delete directives and the new order, so conditions others wrote stay;
// atomic lists are sent whole. Whatever PodStatus holds beyond the fields handled
// here (resource claims, allocated resources, fields added to the API later) still
// goes through the generic diff, so nothing is ever dropped.
func Build(uid types.UID, current, desired *corev1.PodStatus) ([]byte, error) {
	if same(current, desired) {
		return nil, nil // nothing changed, or only what the API does not keep
	}
	w := patchWriter{buf: make([]byte, 0, 1024)}
	w.buf = append(w.buf, `{"metadata":{"uid":`...)
	w.buf = appendJSONString(w.buf, string(uid))
	w.buf = append(w.buf, `},"status":{`...)
	empty := len(w.buf)

	c, d := current, desired
	if c.ObservedGeneration != d.ObservedGeneration {
		w.name("observedGeneration")
		if d.ObservedGeneration == 0 {
			w.buf = append(w.buf, "null"...)
		} else {
			w.buf = strconv.AppendInt(w.buf, d.ObservedGeneration, 10)
		}
	}
	w.string("phase", string(c.Phase), string(d.Phase))
	w.string("message", c.Message, d.Message)
	w.string("reason", c.Reason, d.Reason)
	w.string("nominatedNodeName", c.NominatedNodeName, d.NominatedNodeName)
	w.string("hostIP", c.HostIP, d.HostIP)
	w.string("podIP", c.PodIP, d.PodIP)
	w.string("qosClass", string(c.QOSClass), string(d.QOSClass))
	if !sameTime(c.StartTime, d.StartTime) {
		w.name("startTime")
		w.buf = appendTime(w.buf, d.StartTime)
	}

	// What the generic diff is left with: the fields not written here, and a merged
	// list whose keys repeat (the API does not forbid it for conditions, and only
	// the generic diff knows what it makes of that).
	rc, rd := restOf(c), restOf(d)
	if !mergeList(&w, "conditions", "type", c.Conditions, d.Conditions, conditionKey, appendCondition) {
		rc.Conditions, rd.Conditions = c.Conditions, d.Conditions
	}
	if !mergeList(&w, "hostIPs", "ip", c.HostIPs, d.HostIPs, hostIPKey, appendHostIP) {
		rc.HostIPs, rd.HostIPs = c.HostIPs, d.HostIPs
	}
	if !mergeList(&w, "podIPs", "ip", c.PodIPs, d.PodIPs, podIPKey, appendPodIP) {
		rc.PodIPs, rd.PodIPs = c.PodIPs, d.PodIPs
	}
	// Lists without a patch strategy: the API replaces them whole.
	atomicList(&w, "initContainerStatuses", &c.InitContainerStatuses, &d.InitContainerStatuses)
	atomicList(&w, "containerStatuses", &c.ContainerStatuses, &d.ContainerStatuses)
	atomicList(&w, "ephemeralContainerStatuses", &c.EphemeralContainerStatuses, &d.EphemeralContainerStatuses)
	atomicList(&w, "volumeHealth", &c.VolumeHealth, &d.VolumeHealth)
	if w.err != nil {
		return nil, fmt.Errorf("building the status patch of pod %s: %w", uid, w.err)
	}
	if !same(&rc, &rd) {
		if err := w.genericDiff(&rc, &rd); err != nil {
			return nil, fmt.Errorf("building the status patch of pod %s: %w", uid, err)
		}
	}
	if len(w.buf) == empty {
		return nil, nil
	}
	return append(w.buf, "}}"...), nil
}

// restOf is s without the fields Build writes itself. A field missing here is
// still patched, through the generic diff; a field Build writes must be
// cleared here, or the patch would carry it twice.
func restOf(s *corev1.PodStatus) corev1.PodStatus {
	r := *s
	r.ObservedGeneration = 0
	r.Phase, r.Message, r.Reason, r.NominatedNodeName = "", "", "", ""
	r.HostIP, r.PodIP, r.QOSClass, r.StartTime = "", "", "", nil
	r.Conditions, r.HostIPs, r.PodIPs = nil, nil, nil
	r.InitContainerStatuses, r.ContainerStatuses, r.EphemeralContainerStatuses = nil, nil, nil
	r.VolumeHealth = nil
	return r
}

// patchWriter appends the members of the patch's status object to buf.
type patchWriter struct {
	buf   []byte
	comma bool // a member was written, the next needs a separator
	enc   *json.Encoder
	err   error // the first error of an encoding
}

// name starts a member of the status object.
func (w *patchWriter) name(name string) {
	if w.comma {
		w.buf = append(w.buf, ',')
	}
	w.comma = true
	w.buf = appendJSONString(w.buf, name)
	w.buf = append(w.buf, ':')
}

// string writes a string member that changed: its new value, or null to clear it,
// as every string of PodStatus is omitted when empty.
func (w *patchWriter) string(name, was, now string) {
	if was == now {
		return
	}
	w.name(name)
	if now == "" {
		w.buf = append(w.buf, "null"...)
		return
	}
	w.buf = appendJSONString(w.buf, now)
}

// Write lets encoding/json write values straight into the patch.
func (w *patchWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// value writes v as encoding/json does.
func (w *patchWriter) value(v any) {
	if w.enc == nil {
		w.enc = json.NewEncoder(w)
	}
	if err := w.enc.Encode(v); err != nil {
		w.err = err
		return
	}
	w.buf = w.buf[:len(w.buf)-1] // Encode ends the value with a newline
}

// atomicList writes a list the API replaces whole when it differs. It takes
// pointers, which the comparison does not have to copy to the heap.
func atomicList[E any](w *patchWriter, name string, was, now *[]E) {
	if same(was, now) {
		return
	}
	w.name(name)
	if len(*now) == 0 {
		w.buf = append(w.buf, "null"...)
		return
	}
	w.value(now)
}

// mergeList writes the patch of a list the API merges by key, as the strategic
// merge diff does: the new and changed elements (appendElem writes an element
// whole, with null for what it no longer has), a delete directive for each
// removed one, and the new order of keys when anything changed or moved. Elements
// others added on the server stay. It reports false, writing nothing, when a key
// repeats in either list.
func mergeList[E any](w *patchWriter, name, keyName string, was, now []E, key func(*E) string, appendElem func(b []byte, was, now *E) []byte) bool {
	switch {
	case len(was) == 0 && len(now) == 0:
		return true
	case len(now) == 0:
		w.name(name)
		w.buf = append(w.buf, "null"...)
		return true
	case len(was) == 0:
		w.name(name)
		w.buf = append(w.buf, '[')
		for i := range now {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			w.buf = appendElem(w.buf, nil, &now[i])
		}
		w.buf = append(w.buf, ']')
		return true
	}
	if repeats(was, key) || repeats(now, key) {
		return false
	}
	find := func(list []E, k string) *E {
		for i := range list {
			if key(&list[i]) == k {
				return &list[i]
			}
		}
		return nil
	}
	moved := len(was) != len(now)
	mark := len(w.buf)
	comma := w.comma
	w.name(name)
	w.buf = append(w.buf, '[')
	start := len(w.buf)
	for i := range now {
		n := &now[i]
		o := find(was, key(n))
		if !moved && key(&was[i]) != key(n) {
			moved = true
		}
		if o != nil && same(o, n) {
			continue
		}
		if len(w.buf) > start {
			w.buf = append(w.buf, ',')
		}
		w.buf = appendElem(w.buf, o, n)
	}
	for i := range was {
		k := key(&was[i])
		if find(now, k) != nil {
			continue
		}
		if len(w.buf) > start {
			w.buf = append(w.buf, ',')
		}
		w.buf = append(w.buf, "{\""+keyName+"\":"...)
		w.buf = appendJSONString(w.buf, k)
		w.buf = append(w.buf, `,"$patch":"delete"}`...)
	}
	changed := len(w.buf) > start
	if changed {
		w.buf = append(w.buf, ']')
	} else {
		w.buf, w.comma = w.buf[:mark], comma // no element to send
	}
	if changed || moved {
		w.name("$setElementOrder/" + name)
		w.buf = append(w.buf, '[')
		for i := range now {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			w.buf = append(w.buf, "{\""+keyName+"\":"...)
			w.buf = appendJSONString(w.buf, key(&now[i]))
			w.buf = append(w.buf, '}')
		}
		w.buf = append(w.buf, ']')
	}
	return true
}

func repeats[E any](list []E, key func(*E) string) bool {
	for i := range list {
		for j := i + 1; j < len(list); j++ {
			if key(&list[i]) == key(&list[j]) {
				return true
			}
		}
	}
	return false
}

func conditionKey(c *corev1.PodCondition) string { return string(c.Type) }
func hostIPKey(ip *corev1.HostIP) string         { return ip.IP }
func podIPKey(ip *corev1.PodIP) string           { return ip.IP }

// appendCondition writes condition c whole, with null for each field c's JSON
// omits and was's has, so the merge on the server clears it. The fields are
// PodCondition's own: TestTheFieldsWrittenDirectlyAreAsStatusPatchAssumes fails
// when it gains one.
func appendCondition(b []byte, was, c *corev1.PodCondition) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, string(c.Type))
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(c.Status))
	b = append(b, `,"lastProbeTime":`...)
	b = appendTime(b, &c.LastProbeTime)
	b = append(b, `,"lastTransitionTime":`...)
	b = appendTime(b, &c.LastTransitionTime)
	if c.ObservedGeneration != 0 {
		b = append(b, `,"observedGeneration":`...)
		b = strconv.AppendInt(b, c.ObservedGeneration, 10)
	} else if was != nil && was.ObservedGeneration != 0 {
		b = append(b, `,"observedGeneration":null`...)
	}
	b = appendOmitEmpty(b, "reason", c.Reason, was != nil && was.Reason != "")
	b = appendOmitEmpty(b, "message", c.Message, was != nil && was.Message != "")
	return append(b, '}')
}

// appendOmitEmpty writes a member of an element that JSON omits when empty: its
// value, null if it had one before, else nothing.
func appendOmitEmpty(b []byte, name, v string, had bool) []byte {
	if v == "" && !had {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	if v == "" {
		return append(b, "null"...)
	}
	return appendJSONString(b, v)
}

// The IP lists' elements are nothing but their key.
func appendHostIP(b []byte, _, ip *corev1.HostIP) []byte { return appendIP(b, ip.IP) }
func appendPodIP(b []byte, _, ip *corev1.PodIP) []byte   { return appendIP(b, ip.IP) }

func appendIP(b []byte, ip string) []byte {
	b = append(b, `{"ip":`...)
	b = appendJSONString(b, ip)
	return append(b, '}')
}

// genericDiff writes the strategic-merge diff of the fields left in rc and rd, as
// the generic library makes it.
func (w *patchWriter) genericDiff(rc, rd *corev1.PodStatus) error {
	oldJSON, err := json.Marshal(corev1.Pod{Status: *rc})
	if err != nil {
		return err
	}
	newJSON, err := json.Marshal(corev1.Pod{Status: *rd})
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
	if err != nil {
		return err
	}
	var p struct {
		Status map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(p.Status)) { // a stable patch, for tests and logs
		w.name(k)
		w.buf = append(w.buf, p.Status[k]...)
	}
	return nil
}
