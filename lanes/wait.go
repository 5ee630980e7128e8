package lanes

import "time"

// waitBriefly paces the retries of removing a cgroup whose last process is still exiting.
func waitBriefly() { time.Sleep(20 * time.Millisecond) }
