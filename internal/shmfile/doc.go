// Package shmfile makes and maps the files that Braid's ranks share in
// /dev/shm (Create, Open: the shm transport's segments, the host
// collectives' areas, package gpu's mailbox), and reaps those that ranks
// unlink once their peers have mapped them: a rank killed in between
// leaves its file behind. Such files carry their maker's pid and PID
// namespace in their names, so that a later rank can tell, without opening
// them, which were left by processes that are gone.
//
// Example, as package shmcoll names and reaps the files of its areas:
//
//	re := regexp.MustCompile(`^braid-coll-([0-9]+)-n([0-9]+)-[0-9a-f]+$`)
//	shmfile.ReapStale("/dev/shm", re)
//	name := fmt.Sprintf("braid-coll-%d-n%d-%x", os.Getpid(), shmfile.PIDNamespace(), rnd)
package shmfile
