use crate::error::CheckError;
use crate::measure::Out;
use crate::spec::CheckSpec;

pub(crate) struct Config;

pub(crate) fn config(_spec: &CheckSpec) -> Result<Config, CheckError> {
    Err(CheckError::field("kind", "not yet"))
}

pub(crate) async fn run(_c: &Config, _out: &mut Out) -> Result<(), CheckError> {
    Ok(())
}
