//! Weekly time windows: `<days> <HH:MM>-<HH:MM> <IANA zone>`, e.g.
//! `Mon-Fri 09:00-17:00 America/New_York`.
//!
//! * Days: a single day (`Sat`), a range that may wrap (`Mon-Fri`, `Fri-Mon`), or a comma list of
//!   days and ranges (`Mon,Wed,Fri`, `Mon-Tue,Thu`). Names are the three-letter English
//!   abbreviations, case-insensitive.
//! * Times: start inclusive, end exclusive; `24:00` is allowed as an end. An end before the start
//!   is an overnight window (`22:00-06:00`). **The days name the day the window starts**:
//!   `Fri 22:00-06:00` covers Friday 22:00 to Saturday 06:00, and not Friday 00:00-06:00.
//! * Zone: any IANA name known to `chrono-tz` (`UTC`, `Europe/Berlin`). The window is wall-clock
//!   time in that zone, evaluated from the actual instant, so it is right across DST changes: on a
//!   spring-forward day the skipped hour never matches, on a fall-back day the repeated hour
//!   matches both times it occurs.

use chrono::{Datelike, Timelike};
use chrono_tz::Tz;

use crate::time::Timestamp;

/// Day abbreviations, Monday first (index = `num_days_from_monday`).
const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// Minutes in a day; the only allowed value of an end of `24:00`.
const MINUTES_PER_DAY: u32 = 24 * 60;

/// A compiled weekly window.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Bit `d` set when the window starts on weekday `d` (Monday = 0).
    days: u8,
    /// Start, minutes after midnight, inclusive.
    start_minute: u32,
    /// End, minutes after midnight, exclusive; may be `MINUTES_PER_DAY`.
    end_minute: u32,
    zone: Tz,
}

impl Schedule {
    /// Parses a schedule; returns a lowercase message naming the problem on bad input.
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [days_text, times_text, zone_text] = parts.as_slice() else {
            return Err(format!(
                "bad schedule `{text}`: expected `<days> <HH:MM>-<HH:MM> <IANA zone>`, \
                 e.g. `Mon-Fri 09:00-17:00 America/New_York`"
            ));
        };
        let days =
            parse_days(days_text).map_err(|problem| format!("bad schedule `{text}`: {problem}"))?;
        let (start_minute, end_minute) = parse_times(times_text)
            .map_err(|problem| format!("bad schedule `{text}`: {problem}"))?;
        let zone: Tz = zone_text
            .parse()
            .map_err(|_| format!("bad schedule `{text}`: unknown time zone `{zone_text}`"))?;
        Ok(Self {
            days,
            start_minute,
            end_minute,
            zone,
        })
    }

    /// Returns whether the instant falls inside the window.
    pub fn contains(&self, now: &Timestamp) -> bool {
        let local = now.with_timezone(&self.zone);
        let weekday = local.weekday().num_days_from_monday();
        let minute = local.hour() * 60 + local.minute();
        let starts_today = self.days & (1 << weekday) != 0;
        if self.start_minute < self.end_minute {
            return starts_today && minute >= self.start_minute && minute < self.end_minute;
        }
        // Overnight: the part before midnight belongs to today's window, the part after
        // midnight to the window that started yesterday.
        let yesterday = (weekday + 6) % 7;
        let started_yesterday = self.days & (1 << yesterday) != 0;
        (starts_today && minute >= self.start_minute)
            || (started_yesterday && minute < self.end_minute)
    }
}

/// Parses `Mon-Fri`, `Fri-Mon`, `Mon,Wed`, `Sat` into a weekday bit set.
fn parse_days(text: &str) -> Result<u8, String> {
    let mut days = 0_u8;
    for item in text.split(',') {
        let item_days = match item.split_once('-') {
            Some((first, last)) => {
                let first_day = parse_day(first)?;
                let last_day = parse_day(last)?;
                if first_day == last_day {
                    return Err(format!(
                        "day range `{item}` starts and ends on the same day"
                    ));
                }
                let mut range = 0_u8;
                let mut day = first_day;
                loop {
                    range |= 1 << day;
                    if day == last_day {
                        break;
                    }
                    day = (day + 1) % 7;
                }
                range
            }
            None => 1 << parse_day(item)?,
        };
        if days & item_days != 0 {
            return Err(format!("day list `{text}` names a day twice"));
        }
        days |= item_days;
    }
    Ok(days)
}

/// Parses one three-letter day name.
fn parse_day(text: &str) -> Result<u8, String> {
    let lower = text.to_ascii_lowercase();
    DAY_NAMES
        .iter()
        .position(|name| *name == lower)
        .and_then(|index| u8::try_from(index).ok())
        .ok_or_else(|| format!("unknown day `{text}` (use Mon, Tue, Wed, Thu, Fri, Sat, Sun)"))
}

/// Parses `HH:MM-HH:MM` into start and end minutes.
fn parse_times(text: &str) -> Result<(u32, u32), String> {
    let Some((start_text, end_text)) = text.split_once('-') else {
        return Err(format!("bad time range `{text}`: expected `HH:MM-HH:MM`"));
    };
    let start = parse_time(start_text)?;
    let end = parse_time(end_text)?;
    if start == MINUTES_PER_DAY {
        return Err("a window cannot start at 24:00".to_owned());
    }
    if start == end {
        return Err(format!("time range `{text}` is empty (start equals end)"));
    }
    Ok((start, end))
}

/// Parses `HH:MM` (two digits each; `24:00` allowed) into minutes after midnight.
fn parse_time(text: &str) -> Result<u32, String> {
    let bad = || format!("bad time `{text}`: expected `HH:MM` between 00:00 and 24:00");
    let (hours_text, minutes_text) = text.split_once(':').ok_or_else(bad)?;
    let two_digits = |part: &str| part.len() == 2 && part.bytes().all(|byte| byte.is_ascii_digit());
    if !two_digits(hours_text) || !two_digits(minutes_text) {
        return Err(bad());
    }
    let hours: u32 = hours_text.parse().map_err(|_| bad())?;
    let minutes: u32 = minutes_text.parse().map_err(|_| bad())?;
    let total = hours * 60 + minutes;
    if minutes >= 60 || total > MINUTES_PER_DAY {
        return Err(bad());
    }
    Ok(total)
}
