package soak

import (
	"math"
	"testing"
)

func TestAFittedLineGivesTheGrowthOverTheWindow(t *testing.T) {
	// 1 MiB a minute over ten minutes, with noise that cancels out.
	var x, y []float64
	for i := range 11 {
		noise := 0.3 * float64(1-2*(i%2))
		x, y = append(x, float64(60*i)), append(y, 100+float64(i)+noise)
	}
	tr, err := fit(x, y, Limit{Share: 0.05, Floor: 1})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(tr.PerHour-60) > 1 || math.Abs(tr.Growth-10) > 0.2 {
		t.Errorf("slope %.2f/h, growth %.2f; want 60/h and 10", tr.PerHour, tr.Growth)
	}
	// 5 % of a mean of 105 is 5.25: ten is not flat.
	if tr.Flat || math.Abs(tr.Allowed-5.25) > 0.01 {
		t.Errorf("flat %v, allowed %.2f; want not flat, 5.25 allowed", tr.Flat, tr.Allowed)
	}
}

func TestNoiseAndShrinkingAreFlat(t *testing.T) {
	for name, y := range map[string][]float64{
		"noise around a level": {40, 44, 39, 43, 41, 42, 40, 43},
		"shrinking":            {80, 70, 60, 50, 40, 30, 20, 10},
	} {
		x := make([]float64, len(y))
		for i := range x {
			x[i] = float64(30 * i)
		}
		tr, err := fit(x, y, Limit{Share: 0.05, Floor: 5})
		if err != nil {
			t.Fatal(err)
		}
		if !tr.Flat {
			t.Errorf("%s: growth %.1f of %.1f allowed: not flat", name, tr.Growth, tr.Allowed)
		}
	}
}

// A small count is judged by its floor, not by its share of the mean: one
// more socket among twenty is not a leak.
func TestASmallCountIsJudgedByItsFloor(t *testing.T) {
	tr, err := fit([]float64{0, 60, 120}, []float64{20, 21, 22}, Limit{Share: 0.05, Floor: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Flat || tr.Allowed != 5 {
		t.Errorf("flat %v, allowed %.1f; want flat within the floor of 5", tr.Flat, tr.Allowed)
	}
}

func TestAFitNeedsTwoTimes(t *testing.T) {
	for _, x := range [][]float64{{0}, {5, 5}} {
		if _, err := fit(x, make([]float64, len(x)), Limit{}); err == nil {
			t.Errorf("fit of x=%v: no error", x)
		}
	}
}

func TestTheResultIsFlatOnlyWhenEveryFigureIs(t *testing.T) {
	r := &Result{WarmUpSeconds: 60}
	for i := range 10 {
		r.Samples = append(r.Samples, Sample{Seconds: float64(30 * i), HeapMiB: 40, RSSMiB: 80,
			Goroutines: 200 + float64(10*i), FDs: 30, Sockets: 20, ProviderPods: 1000})
	}
	if err := r.fit(); err != nil {
		t.Fatal(err)
	}
	if r.Flat || r.Trends["goroutines"].Flat || !r.Trends["heap_mib"].Flat {
		t.Errorf("flat %v, trends %+v; want goroutines alone not flat", r.Flat, r.Trends)
	}
	// Samples of the warm-up are left out: growth there and flat after is flat.
	r = &Result{WarmUpSeconds: 60}
	for i := range 10 {
		g := 300.0
		if i < 2 {
			g = 100
		}
		r.Samples = append(r.Samples, Sample{Seconds: float64(30 * i), HeapMiB: 40, RSSMiB: 80, Goroutines: g, FDs: 30, Sockets: 20, ProviderPods: 1000})
	}
	if err := r.fit(); err != nil || !r.Flat {
		t.Errorf("growth during the warm-up only: flat %v (%v), trends %+v", r.Flat, err, r.Trends)
	}
}
