// SPDX-License-Identifier: GPL-2.0
/*
 * ukit: a test module for unwindkit's captures (testdata/kernel/README.md,
 * capture deb-6.1-mod). Loading it starts the kthread "ukit" that blocks in
 * a chain of this module's own functions, ukit_thread -> ukit_outer ->
 * ukit_middle -> ukit_inner -> schedule_timeout_interruptible, so that
 * sysrq-t prints a trace through module text ("[ukit]") and a vmcore has a
 * task whose stack passes through it. Each link is noinline and does work
 * after its call, so none is a tail call.
 */
#include <linux/module.h>
#include <linux/kthread.h>
#include <linux/sched.h>
#include <linux/delay.h>

static struct task_struct *ukit_task;
static volatile int ukit_depth;

static noinline int ukit_inner(int n)
{
	while (!kthread_should_stop())
		schedule_timeout_interruptible(HZ);
	ukit_depth = n;
	return n + 1;
}

static noinline int ukit_middle(int n)
{
	int r = ukit_inner(n + 1);

	ukit_depth += r;
	return r * 2;
}

static noinline int ukit_outer(int n)
{
	int r = ukit_middle(n + 1);

	ukit_depth += r;
	return r * 3;
}

static int ukit_thread(void *arg)
{
	int r = ukit_outer(1);

	ukit_depth = r;
	return 0;
}

static int __init ukit_init(void)
{
	ukit_task = kthread_run(ukit_thread, NULL, "ukit");
	if (IS_ERR(ukit_task))
		return PTR_ERR(ukit_task);
	return 0;
}

static void __exit ukit_exit(void)
{
	kthread_stop(ukit_task);
}

module_init(ukit_init);
module_exit(ukit_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("unwindkit test module: a kthread blocked in a chain of module functions");
