package release

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SBOM media types: the document's, and its artifact's config.
const (
	spdxMediaType       = "application/spdx+json"
	sbomConfigMediaType = "application/vnd.vkubelet.sbom.config.v1+json"
)

// spdxDoc is the part of an SPDX 2.3 JSON document an SBOM of a Go binary needs.
type spdxDoc struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      spdxCreation   `json:"creationInfo"`
	Packages          []spdxPackage  `json:"packages"`
	Relationships     []spdxRelation `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string       `json:"name"`
	SPDXID           string       `json:"SPDXID"`
	VersionInfo      string       `json:"versionInfo"`
	DownloadLocation string       `json:"downloadLocation"`
	ExternalRefs     []spdxExtRef `json:"externalRefs,omitempty"`
	FilesAnalyzed    bool         `json:"filesAnalyzed"`
}

type spdxExtRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelation struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SBOM returns an SPDX 2.3 JSON document of the Go binary at path: vkubelet at
// version, and every module it links with its version, its go.sum hash and a
// package URL, read from the binary's build information (what the go command
// recorded, so the document is of what was built). created is its time.
func SBOM(path, version string, created time.Time) ([]byte, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("release: SBOM of %s: %w", path, err)
	}
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "vkubelet-" + version,
		DocumentNamespace: "https://github.com/vkubelet/vkubelet/releases/" + version + "/sbom",
		CreationInfo: spdxCreation{Created: created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: vkubelet internal/lab/release", "Tool: " + bi.GoVersion}},
	}
	root := spdxPackage{Name: bi.Main.Path, SPDXID: "SPDXRef-vkubelet", VersionInfo: version,
		DownloadLocation: "https://github.com/vkubelet/vkubelet", ExternalRefs: []spdxExtRef{purl(bi.Main.Path, version)}}
	doc.Packages = append(doc.Packages, root)
	doc.Relationships = append(doc.Relationships, spdxRelation{"SPDXRef-DOCUMENT", "DESCRIBES", root.SPDXID})
	for i, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		p := spdxPackage{Name: m.Path, SPDXID: fmt.Sprintf("SPDXRef-Module-%d", i), VersionInfo: m.Version,
			DownloadLocation: "https://proxy.golang.org/" + m.Path + "/@v/" + m.Version + ".zip",
			ExternalRefs:     []spdxExtRef{purl(m.Path, m.Version)}}
		if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
			// go.sum's h1 is a SHA-256 of the module's file list, base64: SPDX
			// has no algorithm for it, so it is kept as the package's comment
			// would be, in an external reference.
			p.ExternalRefs = append(p.ExternalRefs, spdxExtRef{"OTHER", "go-sum-h1", h})
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelation{root.SPDXID, "DEPENDS_ON", p.SPDXID})
	}
	doc.Packages = append(doc.Packages, spdxPackage{Name: "go", SPDXID: "SPDXRef-Go", VersionInfo: bi.GoVersion,
		DownloadLocation: "https://go.dev/dl/", ExternalRefs: []spdxExtRef{purl("golang.org/go", bi.GoVersion)}})
	doc.Relationships = append(doc.Relationships, spdxRelation{"SPDXRef-Go", "BUILD_DEPENDENCY_OF", root.SPDXID})
	return json.MarshalIndent(doc, "", "  ")
}

// purl is a Go module's package URL.
func purl(path, version string) spdxExtRef {
	return spdxExtRef{"PACKAGE-MANAGER", "purl", "pkg:golang/" + path + "@" + version}
}

// sbomArtifact is the SBOM as an OCI artifact: one layer of SPDX JSON.
func sbomArtifact(sbom []byte, created time.Time) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer(sbom, spdxMediaType))
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, sbomConfigMediaType)
	return mutate.CreatedAt(img, v1.Time{Time: created.UTC()})
}
