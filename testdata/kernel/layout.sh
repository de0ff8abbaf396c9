#!/bin/sh
# Structure layouts and data symbols of a captured kernel, read from its own vmlinux:
#
#   sh testdata/kernel/layout.sh deb-6.1     # vmlinux from linux-image-6.1.0-57-cloud-arm64-dbg
#   sh testdata/kernel/layout.sh scs-6.12    # vmlinux from build-scs.sh ($KCAP/scs/scs-6.12)
#   sh testdata/kernel/layout.sh deb-7.2     # vmlinux from sid's linux-image-7.2.13+deb14-cloud-arm64-dbg
#                                            # (downloaded by capture.sh's sid apt state, $KCAP/sid-apt)
#
# Writes testdata/kernel/NAME/layout.txt: pahole's view (from the .BTF section of vmlinux, which
# is what the running kernel carries between __start_BTF and __stop_BTF) of pt_regs,
# thread_info, cpu_context, thread_struct's and task_struct's members an unwinder needs, and the
# config options that decide stack sizes and unwinding rules; and datasyms.txt.gz: the `nm -n`
# lines of the data and per-CPU symbols an unwinder over the vmcore needs (Debian's 6.1 kernel
# has no CONFIG_KALLSYMS_ALL, so its /proc/kallsyms lacks them). The Debian -dbg packages are big
# (260-320 MB); they go to $KCAP/debs and the vmlinux to $KCAP/dbg/NAME, never into git.
set -eu
name=${1:?usage: layout.sh deb-6.1|deb-6.12|deb-7.2|scs-NAME}
here=$(cd "$(dirname "$0")" && pwd)
KCAP=${KCAP:-/work/kcap}
out=$here/$name
mkdir -p "$out"
case $name in
deb-6.1 | deb-6.1-mod) dbg=linux-image-6.1.0-57-cloud-arm64-dbg kver=6.1.0-57-cloud-arm64 ;;
deb-6.12) dbg=linux-image-6.12.117+deb12-cloud-arm64-dbg kver=6.12.117+deb12-cloud-arm64 ;;
deb-7.2) dbg=linux-image-7.2.13+deb14-cloud-arm64-dbg kver=7.2.13+deb14-cloud-arm64 ;;
scs-*) dbg= ;;
*) echo "unknown kernel $name" >&2; exit 2 ;;
esac
if [ -n "$dbg" ]; then
	vmlinux=$KCAP/dbg/${name%-mod}/usr/lib/debug/boot/vmlinux-$kver
	if [ ! -f "$vmlinux" ]; then
		deb=
		for f in "$KCAP"/debs/*_arm64.deb; do
			case ${f##*/} in "$dbg"_*) deb=$f ;; esac
		done
		if [ -z "$deb" ]; then
			if [ "$name" = deb-7.2 ]; then # sid, through the apt state capture.sh made
				sa=$KCAP/sid-apt
				(cd "$KCAP/debs" && flock /tmp/apt.lock apt-get -o Dir::State="$sa/state" -o Dir::State::status="$sa/state/status" \
					-o Dir::Cache="$sa/cache" -o Dir::Etc::SourceList="$sa/sources.list" -o Dir::Etc::SourceParts=/dev/null \
					-o APT::Architecture=arm64 download "$dbg")
			else
				(cd "$KCAP/debs" && flock /tmp/apt.lock apt-get download "$dbg:arm64")
			fi
			for f in "$KCAP"/debs/*_arm64.deb; do
				case ${f##*/} in "$dbg"_*) deb=$f ;; esac
			done
		fi
		mkdir -p "$KCAP/dbg/$name"
		# sid's boot/vmlinux-KVER is a link to lib/modules/KVER/vmlinux
		dpkg-deb --fsys-tarfile "$deb" | (cd "$KCAP/dbg/$name" && nice tar -x --wildcards '*boot/vmlinux-*' "*/lib/modules/$kver/vmlinux" 2>/dev/null ||
			nice tar -x --wildcards '*boot/vmlinux-*')
	fi
	config=$KCAP/kernels/$name/boot/config-$kver
	[ -f "$config" ] || config=$KCAP/kernels/$name/usr/lib/modules/$kver/config # sid's layout
else
	vmlinux=$KCAP/scs/$name/vmlinux
	config=$KCAP/scs/$name/config
fi

{
	echo "# $name: layouts from the .BTF of $(basename "$vmlinux") (pahole -F btf $(pahole --version)), sha256 $(sha256sum "$vmlinux" | cut -c1-16)..."
	echo
	echo "## config"
	grep -E '^(# )?CONFIG_(VMAP_STACK|SHADOW_CALL_STACK|DYNAMIC_SCS|UNWIND_PATCH_PAC_INTO_SCS|KASAN|KASAN_GENERIC|ARM64_VA_BITS|ARM64_VA_BITS_[0-9]+|ARM64_PA_BITS|ARM64_LPA2|ARM64_4K_PAGES|ARM64_16K_PAGES|ARM64_64K_PAGES|ARM64_PTR_AUTH|ARM64_PTR_AUTH_KERNEL|ARM64_BTI_KERNEL|FRAME_POINTER|ARM_SDE_INTERFACE|KALLSYMS_ALL|NR_CPUS|FUNCTION_GRAPH_TRACER|KRETPROBES|RETHOOK|THREAD_INFO_IN_TASK|PREEMPT|PREEMPT_NONE|PREEMPT_VOLUNTARY|DEBUG_INFO_BTF|RANDSTRUCT_NONE)[= ]' "$config" || true
	for s in pt_regs user_pt_regs thread_info cpu_context stack_info stackframe frame_record frame_record_meta; do
		echo
		echo "## struct $s"
		pahole -F btf -C "$s" "$vmlinux" 2>/dev/null || echo "(not in this kernel)"
	done
	for s in thread_struct task_struct; do
		echo
		echo "## struct $s (members an unwinder uses; pahole prints byte offset and size)"
		pahole -F btf -C "$s" "$vmlinux" 2>/dev/null |
			grep -E '^	[^	].*[ *](thread_info|__state|stack|usage|flags|on_cpu|cpu|pid|tgid|tasks|comm\[16\]|thread|cpu_context|stack_refcount|ret_stack|curr_ret_stack|kretprobe_instances|scs_sp|scs_base);|/\* size:'
	done
} >"$out/layout.txt"

llvm-nm -n "$vmlinux" |
	grep -E ' (_text|_stext|_etext|_sdata|_edata|_end|__init_begin|__init_end|swapper_pg_dir|idmap_pg_dir|init_pg_dir|tramp_pg_dir|reserved_pg_dir|init_task|init_thread_union|init_stack|init_shadow_call_stack|__per_cpu_offset|__per_cpu_start|__per_cpu_end|__per_cpu_load|irq_stack_ptr|irq_shadow_call_stack_ptr|overflow_stack|sdei_stack_normal_ptr|sdei_stack_critical_ptr|sdei_shadow_call_stack_normal_ptr|sdei_shadow_call_stack_critical_ptr|runqueues|cpu_number|current_task|__entry_task|kimage_voffset|memstart_addr|vabits_actual|physvirt_offset|vmemmap|__start_BTF|__stop_BTF|vmcoreinfo_data|vmcoreinfo_note|kallsyms_(offsets|relative_base|num_syms|names|markers|seqs_of_names|token_table|token_index|addresses)|__start_rodata|__end_rodata|__irqentry_text_start|__irqentry_text_end|__entry_text_start|__entry_text_end|__softirqentry_text_start|__softirqentry_text_end|cpu_online_mask|__cpu_online_mask|__cpu_possible_mask|nr_cpu_ids|mpidr_hash|__boot_cpu_mode|cpu_logical_map|__cpu_logical_map|kimage_vaddr|page_offset_base|arm64_use_ng_mappings|init_mm|jiffies|jiffies_64|system_state|ftrace_graph_call|return_to_handler|kretprobe_trampoline|__kretprobe_trampoline|arch_rethook_trampoline|modules)$' |
	gzip -9 -n >"$out/datasyms.txt.gz"
echo "layout $name: $(wc -l <"$out/layout.txt") lines, $(gzip -dc "$out/datasyms.txt.gz" | wc -l) data symbols"
