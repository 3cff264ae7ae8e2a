package slurm

// PodmanAvailable is podmanAvailable, for the package's external tests.
var PodmanAvailable = podmanAvailable
