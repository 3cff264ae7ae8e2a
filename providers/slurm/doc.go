// Package slurm is `--provider slurm`: a virtual node whose pods run as batch jobs
// on a Slurm cluster, the way HPC centres offload work from Kubernetes.
//
// Each pod is one job, submitted with sbatch under the pod's UID as job name. The
// job's script (script.go) runs the pod's containers with podman on the compute
// node: init containers one after another, then the app containers side by side,
// each container's output in a CRI-format log file and its start, exit code and
// finish in small files of the pod's directory under Config.JobRoot, which must be
// on a filesystem that the node running vkubelet and the compute nodes share.
// Volume files (ConfigMaps, Secrets, projected tokens) and emptyDirs are
// materialized in that directory and mounted.
//
// Statuses come from one squeue call for all jobs every poll interval plus the
// files the script writes (status.go). The pods' job IDs are kept in their
// directories, so a restarted vkubelet finds its jobs again; a pod whose job ID
// was not yet written is looked up by name before anything is submitted, so a
// job is never submitted twice. Logs are read from the log files; exec and attach
// run `srun --overlap --jobid` plus podman exec/attach inside the job's
// allocation. The node's capacity comes from sinfo.
//
// The Slurm commands are the provider's only way to the cluster (cli.go); a test
// cluster for the integration tests and `vkubeletctl up --provider slurm` is started
// by the subpackage slurmenv.
package slurm
