package bench

import (
	"slices"
	"sort"

	"k8s.io/utils/ptr"
)

// Median returns the median of several runs' figures, field by field (the lower
// middle for an even count), with the runs themselves in Runs.
func Median(runs []*Result) *Result {
	if len(runs) == 1 {
		return runs[0]
	}
	out := *runs[0]
	med := func(get func(*Result) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		return median(v)
	}
	out.CeilingPodsPerS = med(func(r *Result) float64 { return r.CeilingPodsPerS })
	out.CeilingBefore = med(func(r *Result) float64 { return r.CeilingBefore })
	out.CeilingAfter = med(func(r *Result) float64 { return r.CeilingAfter })
	out.CeilingDeletePodsPerS = med(func(r *Result) float64 { return r.CeilingDeletePodsPerS })
	out.CeilingWritesPerPod = med(func(r *Result) float64 { return r.CeilingWritesPerPod })
	out.DurationSeconds = med(func(r *Result) float64 { return r.DurationSeconds })
	out.CeilingSeconds = med(func(r *Result) float64 { return r.CeilingSeconds })
	nodes := make([]*NodeResult, len(runs))
	for i, r := range runs {
		nodes[i] = &r.NodeResult
	}
	out.NodeResult = medianNode(nodes)
	out.Kwok = medianOptional(runs, func(r *Result) *NodeResult { return r.Kwok })
	out.Remote = medianOptional(runs, func(r *Result) *NodeResult { return r.Remote })
	out.UpstreamMock = medianOptional(runs, func(r *Result) *NodeResult { return r.UpstreamMock })
	out.UpstreamEngine = medianOptional(runs, func(r *Result) *NodeResult { return r.UpstreamEngine })
	out.Runs = runs
	return &out
}

// medianOptional is the median of a node measured only on request, or nil if
// some run lacks it.
func medianOptional(runs []*Result, get func(*Result) *NodeResult) *NodeResult {
	var nodes []*NodeResult
	for _, r := range runs {
		if n := get(r); n != nil {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) < len(runs) {
		return nil
	}
	m := medianNode(nodes)
	return &m
}

// medianNode is the median of several runs' figures of one node, field by field.
func medianNode(runs []*NodeResult) NodeResult {
	out := *runs[0]
	med := func(get func(*NodeResult) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		return median(v)
	}
	out.PodsPerS = med(func(r *NodeResult) float64 { return r.PodsPerS })
	out.RatioToCeiling = med(func(r *NodeResult) float64 { return r.RatioToCeiling })
	out.P50ms = med(func(r *NodeResult) float64 { return r.P50ms })
	out.P90ms = med(func(r *NodeResult) float64 { return r.P90ms })
	out.P99ms = med(func(r *NodeResult) float64 { return r.P99ms })
	out.WritesPerPod = med(func(r *NodeResult) float64 { return r.WritesPerPod })
	out.WritesByKind = medianByKind(runs, func(r *NodeResult) map[string]float64 { return r.WritesByKind })
	out.DeleteWritesByKind = medianByKind(runs, func(r *NodeResult) map[string]float64 { return r.DeleteWritesByKind })
	if out.IdleWritesPerS != nil {
		out.IdleWritesPerS = medianByKind(runs, func(r *NodeResult) map[string]float64 { return r.IdleWritesPerS })
	}
	if out.PodWatches != nil {
		out.PodWatches = ptr.To(med(func(r *NodeResult) float64 { return ptr.Deref(r.PodWatches, 0) }))
	}
	out.IdleMaxMinuteWritesPerS = med(func(r *NodeResult) float64 { return r.IdleMaxMinuteWritesPerS })
	out.IdleRSSMiB = med(func(r *NodeResult) float64 { return r.IdleRSSMiB })
	out.PeakRSSMiB = med(func(r *NodeResult) float64 { return r.PeakRSSMiB })
	out.RSSGrowthMiB = med(func(r *NodeResult) float64 { return r.RSSGrowthMiB })
	out.IdleAnonMiB = med(func(r *NodeResult) float64 { return r.IdleAnonMiB })
	out.IdleFileMiB = med(func(r *NodeResult) float64 { return r.IdleFileMiB })
	out.AnonMiB = med(func(r *NodeResult) float64 { return r.AnonMiB })
	out.FileMiB = med(func(r *NodeResult) float64 { return r.FileMiB })
	out.HeapGrowthMiB = med(func(r *NodeResult) float64 { return r.HeapGrowthMiB })
	out.CPUSeconds = med(func(r *NodeResult) float64 { return r.CPUSeconds })
	out.ProviderCPUSeconds = med(func(r *NodeResult) float64 { return r.ProviderCPUSeconds })
	out.DeletePodsPerS = med(func(r *NodeResult) float64 { return r.DeletePodsPerS })
	out.DeleteP99ms = med(func(r *NodeResult) float64 { return r.DeleteP99ms })
	out.CreateSeconds = med(func(r *NodeResult) float64 { return r.CreateSeconds })
	out.DeleteSeconds = med(func(r *NodeResult) float64 { return r.DeleteSeconds })
	out.Nodes = runs[0].Nodes
	out.IdleHeapKiBPerNode = med(func(r *NodeResult) float64 { return r.IdleHeapKiBPerNode })
	out.IdleLeaseWritesPer10sNode = med(func(r *NodeResult) float64 { return r.IdleLeaseWritesPer10sNode })
	out.IdleNodeWritesPerMinNode = med(func(r *NodeResult) float64 { return r.IdleNodeWritesPerMinNode })
	out.IdleOtherWritesPerMinNode = med(func(r *NodeResult) float64 { return r.IdleOtherWritesPerMinNode })
	return out
}

// medianByKind is the median of a per-kind figure over runs, kind by kind (a kind a
// run lacks counts as 0 there).
func medianByKind(runs []*NodeResult, get func(*NodeResult) map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, r := range runs {
		for k := range get(r) {
			v := make([]float64, len(runs))
			for i, r := range runs {
				v[i] = get(r)[k]
			}
			out[k] = median(v)
		}
	}
	return out
}

// median is the middle value of v (the lower middle for an even count).
func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

// medianFigures is the median of n runs' figures of one path, figure by figure.
func medianFigures(n int, get func(i int) PathFigures) PathFigures {
	pick := func(f func(PathFigures) float64) float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = f(get(i))
		}
		return median(v)
	}
	return PathFigures{
		PodsPerS: pick(func(f PathFigures) float64 { return f.PodsPerS }),
		Seconds:  pick(func(f PathFigures) float64 { return f.Seconds }),
		P50ms:    pick(func(f PathFigures) float64 { return f.P50ms }),
		P99ms:    pick(func(f PathFigures) float64 { return f.P99ms }),
	}
}
