package shrinking

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

func TestAnItemAddedTwiceIsQueuedOnce(t *testing.T) {
	q := New()
	q.Add("a")
	q.Add("b")
	q.Add("a")
	if q.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", q.Len())
	}
	for _, want := range []string{"a", "b"} {
		if got, shutdown := q.Get(); got != want || shutdown {
			t.Fatalf("Get() = %q, %v; want %q, false", got, shutdown, want)
		}
	}
}

func TestAnItemAddedWhileHandledIsQueuedWhenDone(t *testing.T) {
	q := New()
	q.Add("a")
	item, _ := q.Get()
	q.Add("a")
	q.Add("a")
	if q.Len() != 0 {
		t.Fatalf("an item being handled was queued: Len() = %d", q.Len())
	}
	q.Done(item)
	if q.Len() != 1 {
		t.Fatalf("after Done, Len() = %d, want 1", q.Len())
	}
	if got, _ := q.Get(); got != "a" {
		t.Fatalf("Get() = %q, want a", got)
	}
	q.Done("a")
	if q.Len() != 0 {
		t.Fatalf("an item done and not added again is queued: Len() = %d", q.Len())
	}
}

func TestGetWaitsForAnAdd(t *testing.T) {
	q := New()
	got := make(chan string)
	go func() {
		item, _ := q.Get()
		got <- item
	}()
	select {
	case item := <-got:
		t.Fatalf("Get returned %q from an empty queue", item)
	case <-time.After(50 * time.Millisecond):
	}
	q.Add("a")
	select {
	case item := <-got:
		if item != "a" {
			t.Fatalf("Get() = %q, want a", item)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Get still waits after an add")
	}
}

func TestShutDownHandsOutWhatIsQueuedThenSaysSo(t *testing.T) {
	q := New()
	q.Add("a")
	q.ShutDown()
	q.Add("b")
	if !q.ShuttingDown() {
		t.Fatal("ShuttingDown() = false after ShutDown")
	}
	if got, shutdown := q.Get(); got != "a" || shutdown {
		t.Fatalf("Get() = %q, %v; want a, false", got, shutdown)
	}
	if got, shutdown := q.Get(); got != "" || !shutdown {
		t.Fatalf("Get() = %q, %v; want \"\", true (b came after ShutDown)", got, shutdown)
	}
}

func TestShutDownWakesAWaitingGet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New()
		done := make(chan bool)
		go func() {
			_, shutdown := q.Get()
			done <- shutdown
		}()
		synctest.Wait() // Get waits on the empty queue
		q.ShutDown()
		select {
		case shutdown := <-done:
			if !shutdown {
				t.Fatal("Get returned an item from an empty queue")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Get still waits after ShutDown")
		}
	})
}

func TestShutDownWithDrainWaitsForTheItemsHandedOut(t *testing.T) {
	q := New()
	q.Add("a")
	item, _ := q.Get()
	drained := make(chan struct{})
	go func() {
		q.ShutDownWithDrain()
		close(drained)
	}()
	select {
	case <-drained:
		t.Fatal("ShutDownWithDrain returned while an item was being handled")
	case <-time.After(50 * time.Millisecond):
	}
	q.Done(item)
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("ShutDownWithDrain still waits after the last Done")
	}
}

// The point of the package: after a burst, nothing is kept at its size.
func TestAnEmptiedQueueKeepsNoRoomForTheBurstItHad(t *testing.T) {
	q := New()
	const burst = 1000
	for i := range burst {
		q.Add(fmt.Sprint(i))
	}
	var taken []string
	for range burst / 2 {
		item, _ := q.Get()
		taken = append(taken, item)
	}
	if cap(q.items) > 2*burst {
		t.Errorf("the slice grew to %d for %d items", cap(q.items), burst)
	}
	for range burst / 2 {
		item, _ := q.Get()
		taken = append(taken, item)
	}
	for i, item := range taken {
		if want := fmt.Sprint(i); item != want {
			t.Fatalf("item %d handed out is %q, want %q: not first in, first out", i, item, want)
		}
		q.Done(item)
	}
	if q.items != nil || q.dirty != nil || q.processing != nil {
		t.Errorf("emptied after a burst of %d, the queue keeps items cap %d, dirty %v, processing %v", burst, cap(q.items), q.dirty != nil, q.processing != nil)
	}
}

// Items that keep coming while the queue never empties do not grow the slice
// by the items taken.
func TestASteadyFlowKeepsTheSliceSmall(t *testing.T) {
	q := New()
	for i := range 4 {
		q.Add(fmt.Sprint(i))
	}
	for i := 4; i < 100000; i++ {
		q.Add(fmt.Sprint(i))
		item, _ := q.Get()
		q.Done(item)
	}
	if q.Len() != 4 || cap(q.items) > 64 {
		t.Errorf("Len() = %d, slice cap %d after a steady flow of 4 queued items", q.Len(), cap(q.items))
	}
}
