package podwire

// Field numbers in the protobuf encodings the codec reads (k8s.io/api's and
// apimachinery's generated.proto): each of them declared here once, and each
// checked against the protobuf tag of its field in the Go types (fields_test.go),
// so that an API upgrade that moved one fails the tests rather than read
// another field.
//
// The encodings are deterministic: map entries are written sorted by key, so
// equal fields encode to equal bytes, which the fingerprints rely on.
const (
	podMetadataField = 1 // Pod
	podSpecField     = 2
	podStatusField   = 3

	listMetadataField = 1 // PodList
	listItemsField    = 2

	metaGenerationField    = 7 // ObjectMeta
	metaLabelsField        = 11
	metaAnnotationsField   = 12
	metaOwnerRefsField     = 13
	metaFinalizersField    = 14
	metaManagedFieldsField = 17

	specContainersField     = 2 // PodSpec
	specActiveDeadlineField = 5
	specNodeNameField       = 10
	specInitContainersField = 20
	specReadinessGatesField = 28
	specEphemeralField      = 34
	specResourcesField      = 40

	containerNameField          = 1 // Container
	containerResourcesField     = 8
	containerRestartPolicyField = 24

	statusPhaseField = 1 // PodStatus

	watchEventTypeField   = 1 // metav1.WatchEvent
	watchEventObjectField = 2
	rawExtensionRawField  = 1 // runtime.RawExtension
)
