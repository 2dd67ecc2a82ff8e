mod common;
#[test]
fn scratch() {
    for (case, kernel) in common::cases() {
        for (tag, target) in common::targets() {
            if case == "atomics_f32" && !target.atomic_float_add {
                continue;
            }
            let words = poot_codegen_spirv::render(&kernel, &target).unwrap();
            let r = std::panic::catch_unwind(|| common::run_naga(&words));
            match r {
                Ok(Ok(())) => println!("ok {case}-{tag}"),
                Ok(Err(e)) => println!("ERR {case}-{tag}: {e}"),
                Err(_) => println!("PANIC {case}-{tag}"),
            }
        }
    }
}
