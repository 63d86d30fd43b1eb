//! LeRobot's async inference (`lerobot.async_inference.robot_client`), whose every payload is a
//! pickle: the restricted pickle reader ([`pickle`]), which builds values and never runs
//! anything. The gRPC door that uses it is to come (issue 46).

pub mod pickle;

#[cfg(test)]
mod tests;
