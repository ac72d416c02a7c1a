/* The allocation sizes at which the fault-injecting driver (fault_driver.c) makes the process
 * that runs the allocation fail, and how. Shared by the driver and the probes that ask for it. */
#ifndef CUWIRE_TESTS_SUPPORT_FAULT_SIZES_H_
#define CUWIRE_TESTS_SUPPORT_FAULT_SIZES_H_

#define FAULT_SEGV ((size_t)0x0fa0001)  /* a write through a null pointer: SIGSEGV */
#define FAULT_ABORT ((size_t)0x0fa0002) /* abort(): SIGABRT */
#define FAULT_EXIT ((size_t)0x0fa0003)  /* _exit(3) */
#define FAULT_KILL ((size_t)0x0fa0004)  /* SIGKILL, as the OOM killer sends it */
#define FAULT_HANG ((size_t)0x0fa0005)  /* the whole process stops (SIGSTOP): it answers no one */

#endif
