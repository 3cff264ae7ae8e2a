package e2econformance

import (
	"encoding/xml"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// Outcome is what became of one test.
type Outcome string

const (
	Passed Outcome = "passed"
	Failed Outcome = "failed"
	// ImageUnavailableOutcome is a failure in which the test could not pull an
	// image that cannot be made on this machine (ImageUnavailable): it says
	// nothing about the node.
	ImageUnavailableOutcome Outcome = "image unavailable"
	// Interrupted is a test that was still running when the run was stopped
	// (Ctrl-C, or the suite's --timeout).
	Interrupted Outcome = "interrupted"
	// NotRun is a selected test the run did not reach before it was stopped.
	NotRun Outcome = "not run"
	// Skipped is a test the suite selected and then skipped itself (a missing
	// prerequisite it detected at run time), with the reason in Message.
	Skipped Outcome = "skipped"
)

// Result is one selected test's outcome.
type Result struct {
	Name     string
	Outcome  Outcome
	Duration time.Duration
	// Message is why it failed (the failure's first lines) or was skipped.
	Message string
}

// junitSuites is what ginkgo's JUnit report holds that the run reads.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Status  string  `xml:"status,attr"`
			Time    float64 `xml:"time,attr"`
			Failure *struct {
				Type string `xml:"type,attr"`
				Text string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Type string `xml:"type,attr"`
				Text string `xml:",chardata"`
			} `xml:"error"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// imageRef finds image references in a failure's text, as the pod's status and
// the tests' messages write them (registry/path:tag).
var imageRef = regexp.MustCompile(`[\w.-]+(?::\d+)?/[\w./-]+:[\w.-]+`)

// ReadJUnit reads the tests that ran (or were skipped at run time) from a
// ginkgo JUnit report; the tests the selection left out, which ginkgo lists as
// skipped without a reason, and the suite's setup nodes are left out.
func ReadJUnit(path string) ([]Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc junitSuites
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var results []Result
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			if !strings.HasPrefix(c.Name, "[It] ") {
				continue // [SynchronizedBeforeSuite], [ReportAfterSuite] and the like
			}
			r := Result{Name: strings.TrimPrefix(c.Name, "[It] "), Duration: time.Duration(c.Time * float64(time.Second))}
			switch {
			case c.Failure != nil || c.Error != nil:
				text := ""
				if c.Failure != nil {
					text = c.Failure.Text
				} else {
					text = c.Error.Text
				}
				r.Outcome, r.Message = Failed, firstLines(text, 4)
				if c.Status == "interrupted" || strings.Contains(text, "A suite timeout occurred") {
					r.Outcome = Interrupted
				}
				if why, ok := unavailableImageIn(text); ok {
					r.Outcome, r.Message = ImageUnavailableOutcome, why
				}
			case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
				msg := ""
				if c.Skipped != nil {
					msg = strings.TrimSpace(strings.TrimPrefix(c.Skipped.Message, "skipped"))
					msg = strings.TrimSpace(strings.TrimPrefix(msg, "-"))
				}
				if msg == "" {
					continue // not selected
				}
				r.Outcome, r.Message = Skipped, firstLines(msg, 2)
			default:
				r.Outcome = Passed
			}
			results = append(results, r)
		}
	}
	return results, nil
}

// unavailableImageIn reports whether a failure's text names an image that the
// run cannot make while it says that an image could not be pulled.
func unavailableImageIn(text string) (string, bool) {
	if !strings.Contains(text, "ErrImagePull") && !strings.Contains(text, "ImagePullBackOff") &&
		!strings.Contains(text, "not found") && !strings.Contains(text, "failed to pull") {
		return "", false
	}
	for _, ref := range imageRef.FindAllString(text, -1) {
		if why, ok := ImageUnavailable(ref); ok {
			return ref + ": " + why, true
		}
	}
	return "", false
}

// firstLines is text's first n non-empty lines, joined by " / ".
func firstLines(text string, n int) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
			if len(out) == n {
				break
			}
		}
	}
	return strings.Join(out, " / ")
}
